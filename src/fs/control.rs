//! The control files' grammar and read-back, in the manner of Plan 9 `ctl` files:
//! one write is one command; reading shows what happened.

use crate::render::format_time;

/// A fork this mount made.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ForkRecord {
    pub boundary: u64,
    pub child: String,
}

/// What `cat fork` shows: the forks made from this session and the last error.
#[derive(Clone, Debug, Default)]
pub struct ForkLog {
    forks: Vec<ForkRecord>,
    last_error: Option<(i64, String)>,
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .as_millis() as i64
}

impl ForkLog {
    pub fn record_success(&mut self, record: ForkRecord) {
        self.forks.push(record);
    }

    pub fn record_error(&mut self, message: String) {
        self.last_error = Some((now_ms(), message));
    }

    pub fn status(&self, session: &str) -> String {
        let mut out = format!("# write SEQ or \"SEQ NAME\" here to fork {session:?} through SEQ\n");
        for fork in &self.forks {
            out.push_str(&format!(
                "fork: through seq {} -> {}\n",
                fork.boundary, fork.child
            ));
        }
        match &self.last_error {
            Some((when, message)) => {
                out.push_str(&format!("last-error: {} {message}\n", format_time(*when)))
            }
            None => out.push_str("last-error: none\n"),
        }
        out
    }
}

/// A write to `flush` carries no arguments: an empty line (`echo > flush`) or the
/// word `flush`.
pub fn parse_flush_command(data: &[u8]) -> Result<(), String> {
    let text =
        std::str::from_utf8(data).map_err(|_| "the flush command is not text".to_string())?;
    match text.trim_end_matches('\n') {
        "" | "flush" => Ok(()),
        other => Err(format!(
            "unknown flush command {other:?}: write an empty line (echo > flush)"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flush_commands() {
        assert!(parse_flush_command(b"\n").is_ok());
        assert!(parse_flush_command(b"").is_ok());
        assert!(parse_flush_command(b"flush\n").is_ok());
        assert!(parse_flush_command(b"now please\n").is_err());
    }
}
