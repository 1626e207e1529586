//! `status`: one line saying what a session is doing now, for
//! `watch cat status`. Rendered at each read from the turn scan, what the
//! store tells of its writer, and the clock.

use std::time::Duration;

use serde_json::Value;

use super::format_time;
use crate::model::Refusal;
use crate::model::activity::{RepairCause, WriterPresence};
use crate::model::repair::TurnScan;

/// What a session's view shows, as far as `status` tells it.
#[derive(Clone, Copy, Debug)]
pub enum Shown<'a> {
    /// The session is readable.
    Readable {
        /// What its log shows it doing.
        activity: &'a TurnScan,
        /// Whether the store sees its writer connected.
        writer: WriterPresence,
        /// Set when an open turn is shown closed by crash repair.
        repaired: Option<RepairCause>,
    },
    /// The session cannot be shown; its `error` file says why.
    Unreadable(&'a Refusal),
}

/// The `status` line of a session at `now` (Unix milliseconds), with its newline.
pub fn status_line(shown: Shown, now: i64) -> Vec<u8> {
    let mut parts: Vec<String> = Vec::new();
    match shown {
        Shown::Unreadable(refusal) => {
            parts.push(
                match refusal {
                    Refusal::Corrupt(_) => "damaged",
                    Refusal::Unsupported(_) => "unsupported",
                    Refusal::Unavailable { .. } => "unavailable",
                }
                .into(),
            );
            parts.push("see error".into());
        }
        Shown::Readable {
            activity,
            writer,
            repaired,
        } => match (activity.open_turn(), repaired) {
            (None, _) => {
                parts.push("ended".into());
                parts.push(count(activity.turns(), "turn"));
                parts.extend(last_event(activity));
            }
            (Some(turn), Some(cause)) => {
                parts.push("interrupted".into());
                parts.push("repaired view shown".into());
                parts.push(format!("turn {}", number(turn)));
                parts.push(match cause {
                    RepairCause::WriterGone => "no writer connected".into(),
                    RepairCause::Quiet(quiet) => format!("quiet for {}", duration(quiet)),
                });
                parts.extend(last_event(activity));
            }
            (Some(turn), None) => {
                parts.push("open".into());
                parts.push(format!("turn {}", number(turn)));
                if let Some(step) = activity.open_step() {
                    parts.push(format!("step {}", number(step)));
                }
                for call in activity.open_calls() {
                    let state = match call.started {
                        Some(started) => {
                            let ms = u64::try_from(now.saturating_sub(started)).unwrap_or(0);
                            format!("running for {}", duration(Duration::from_millis(ms)))
                        }
                        None => "not started".into(),
                    };
                    let (name, id) = (one_line(&call.name), one_line(&call.call_id));
                    parts.push(format!("tool {name} ({id}) {state}"));
                }
                parts.extend(last_event(activity));
                if writer == WriterPresence::Connected {
                    parts.push("writer connected".into());
                }
            }
        },
    }
    let mut line = parts.join(" · ").into_bytes();
    line.push(b'\n');
    line
}

fn last_event(activity: &TurnScan) -> Option<String> {
    activity
        .last_time()
        .map(|time| format!("last event {}", format_time(time)))
}

/// Text from the log, with control characters escaped: the line stays one line.
fn one_line(text: &str) -> String {
    text.chars()
        .map(|c| match c.is_control() {
            true => c.escape_default().to_string(),
            false => c.to_string(),
        })
        .collect()
}

fn count(n: u64, noun: &str) -> String {
    match n {
        1 => format!("1 {noun}"),
        n => format!("{n} {noun}s"),
    }
}

/// A turn or step number as logged (a number, or whatever JSON was there).
fn number(value: &Value) -> String {
    match value {
        Value::String(text) => text.clone(),
        other => other.to_string(),
    }
}

/// Whole seconds, minutes from two minutes on, hours from two hours on.
fn duration(d: Duration) -> String {
    let seconds = d.as_secs();
    match seconds {
        0..120 => format!("{seconds} s"),
        120..7200 => format!("{} min {} s", seconds / 60, seconds % 60),
        _ => format!("{} h {} min", seconds / 3600, seconds / 60 % 60),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scan(lines: &str) -> TurnScan {
        let mut scan = TurnScan::default();
        for line in lines.lines().filter(|l| !l.trim().is_empty()) {
            scan.observe(&serde_json::from_str(line).unwrap());
        }
        scan
    }

    fn text(shown: Shown, now: i64) -> String {
        String::from_utf8(status_line(shown, now)).unwrap()
    }

    /// 2026-03-08T13:41:20.000Z
    const T: i64 = 1_772_977_280_000;

    fn open_tool_call() -> TurnScan {
        scan(&format!(
            r#"
{{"type":"turn/start","seq":0,"time":{t0},"data":{{"turn":7}}}}
{{"type":"step/start","seq":1,"time":{t0},"data":{{"turn":7,"step":2}}}}
{{"type":"assistant/message","seq":2,"time":{t0},"data":{{"turn":7,"step":2,"message":{{"role":"assistant","content":[{{"type":"tool-call","id":"call_x1","name":"bash","arguments":"{{}}"}},{{"type":"tool-call","id":"call_y2","name":"read","arguments":"{{}}"}}],"source":{{"kind":"model","provider":"p","model":"m"}},"id":"a"}}}},"sourceEventSeqs":[],"surfaceOp":"append"}}
{{"type":"tool/call","seq":3,"time":{T},"data":{{"turn":7,"step":2,"callId":"call_x1","name":"bash","arguments":"{{}}"}}}}
"#,
            t0 = T - 500
        ))
    }

    #[test]
    fn an_open_turn_names_its_running_tools() {
        let activity = open_tool_call();
        let shown = Shown::Readable {
            activity: &activity,
            writer: WriterPresence::Unknown,
            repaired: None,
        };
        assert_eq!(
            text(shown, T + 93_400),
            "open · turn 7 · step 2 · tool bash (call_x1) running for 93 s · tool read (call_y2) not started · last event 2026-03-08T13:41:20.000Z\n"
        );
        let connected = Shown::Readable {
            activity: &activity,
            writer: WriterPresence::Connected,
            repaired: None,
        };
        assert_eq!(
            text(connected, T + 7_500_000),
            "open · turn 7 · step 2 · tool bash (call_x1) running for 2 h 5 min · tool read (call_y2) not started · last event 2026-03-08T13:41:20.000Z · writer connected\n"
        );
        // A writer's clock a little ahead of ours is no negative time.
        assert!(text(shown, T - 5).contains("running for 0 s"));
    }

    #[test]
    fn an_open_turn_between_tools_shows_its_step() {
        let activity = scan(&format!(
            r#"
{{"type":"turn/start","seq":0,"time":{T},"data":{{"turn":3}}}}
{{"type":"step/start","seq":1,"time":{T},"data":{{"turn":3,"step":1}}}}
"#
        ));
        let shown = Shown::Readable {
            activity: &activity,
            writer: WriterPresence::Unknown,
            repaired: None,
        };
        assert_eq!(
            text(shown, T),
            "open · turn 3 · step 1 · last event 2026-03-08T13:41:20.000Z\n"
        );
    }

    #[test]
    fn a_repaired_turn_says_why() {
        let activity = open_tool_call();
        let gone = Shown::Readable {
            activity: &activity,
            writer: WriterPresence::Gone,
            repaired: Some(RepairCause::WriterGone),
        };
        assert_eq!(
            text(gone, T + 1000),
            "interrupted · repaired view shown · turn 7 · no writer connected · last event 2026-03-08T13:41:20.000Z\n"
        );
        let quiet = Shown::Readable {
            activity: &activity,
            writer: WriterPresence::Unknown,
            repaired: Some(RepairCause::Quiet(Duration::from_secs(612))),
        };
        assert_eq!(
            text(quiet, T + 612_000),
            "interrupted · repaired view shown · turn 7 · quiet for 10 min 12 s · last event 2026-03-08T13:41:20.000Z\n"
        );
    }

    #[test]
    fn an_ended_session_counts_its_turns() {
        let one = scan(&format!(
            r#"
{{"type":"turn/start","seq":0,"time":1000,"data":{{"turn":1}}}}
{{"type":"turn/end","seq":1,"time":{T},"data":{{"turn":1,"reason":{{"kind":"completed"}}}}}}
"#
        ));
        let shown = |activity| Shown::Readable {
            activity,
            writer: WriterPresence::Connected,
            repaired: None,
        };
        assert_eq!(
            text(shown(&one), T + 5),
            "ended · 1 turn · last event 2026-03-08T13:41:20.000Z\n"
        );
        let none = TurnScan::default();
        assert_eq!(text(shown(&none), T), "ended · 0 turns\n");
    }

    #[test]
    fn an_unreadable_session_points_to_its_error_file() {
        let corrupt = Refusal::Corrupt("bad".into());
        assert_eq!(
            text(Shown::Unreadable(&corrupt), T),
            "damaged · see error\n"
        );
        let busy = Refusal::Unavailable {
            cause: crate::model::Cause::Busy,
            reason: "locked".into(),
        };
        assert_eq!(
            text(Shown::Unreadable(&busy), T),
            "unavailable · see error\n"
        );
        let newer = Refusal::Unsupported("version 2".into());
        assert_eq!(
            text(Shown::Unreadable(&newer), T),
            "unsupported · see error\n"
        );
    }

    #[test]
    fn durations_read_in_the_largest_sensible_unit() {
        assert_eq!(duration(Duration::from_millis(999)), "0 s");
        assert_eq!(duration(Duration::from_secs(119)), "119 s");
        assert_eq!(duration(Duration::from_secs(120)), "2 min 0 s");
        assert_eq!(duration(Duration::from_secs(7199)), "119 min 59 s");
        assert_eq!(duration(Duration::from_secs(7200)), "2 h 0 min");
    }
}
