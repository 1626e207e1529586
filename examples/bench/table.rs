//! The printed table: one row per figure, next to its floor and target, and
//! the units its cells are written in.

/// Bytes in a MiB: sizes and rates are printed in MiB.
pub const MIB: f64 = 1024.0 * 1024.0;

pub struct Row {
    pub figure: String,
    pub value: String,
    pub floor: String,
    pub ratio: String,
    pub target: String,
    pub met: String,
}

pub fn secs(s: f64) -> String {
    if s < 1.0 {
        format!("{:.0} ms", s * 1000.0)
    } else {
        format!("{s:.2} s")
    }
}

/// A size in KiB below 1 MiB, else in MiB.
pub fn human(bytes: u64) -> String {
    if (bytes as f64) < MIB {
        format!("{:.0} KiB", bytes as f64 / 1024.0)
    } else {
        format!("{:.1} MiB", bytes as f64 / MIB)
    }
}

pub fn yes(ok: bool) -> String {
    if ok { "yes".into() } else { "NO".into() }
}

/// A cold time compared with its floor: ≤ `max_ratio`× the floor (and under
/// `abs_max` seconds when given).
pub fn time_row(
    figure: String,
    value: f64,
    floor: f64,
    max_ratio: f64,
    abs_max: Option<f64>,
) -> Row {
    let ratio = value / floor;
    let mut target = format!("≤ {max_ratio}× floor");
    let mut ok = ratio <= max_ratio;
    if let Some(max) = abs_max {
        target = format!("< {} and {target}", secs(max));
        ok &= value < max;
    }
    Row {
        figure,
        value: secs(value),
        floor: secs(floor),
        ratio: format!("{ratio:.2}×"),
        target,
        met: yes(ok),
    }
}

/// The daemon's peak RSS against the bound every figure keeps: under 256 MiB.
pub fn rss_row(figure: String, peak: u64) -> Row {
    Row {
        figure,
        value: format!("{:.0} MiB", peak as f64 / MIB),
        floor: "-".into(),
        ratio: "-".into(),
        target: "< 256 MiB".into(),
        met: yes(peak < 256 << 20),
    }
}

/// A timed row with no target of its own.
pub fn info_row(figure: String, value: f64, floor: f64, target: &str) -> Row {
    Row {
        figure,
        value: secs(value),
        floor: secs(floor),
        ratio: format!("{:.2}×", value / floor),
        target: target.into(),
        met: "-".into(),
    }
}

pub fn print_table(rows: &[Row]) {
    let header = ["figure", "value", "floor", "ratio", "target", "met?"];
    let cells: Vec<[&str; 6]> = rows
        .iter()
        .map(|r| {
            [
                &*r.figure, &*r.value, &*r.floor, &*r.ratio, &*r.target, &*r.met,
            ]
        })
        .collect();
    let mut widths = header.map(|h| h.chars().count());
    for row in &cells {
        for (w, c) in widths.iter_mut().zip(row) {
            *w = (*w).max(c.chars().count());
        }
    }
    let line = |row: [&str; 6]| {
        let padded: Vec<String> = row
            .iter()
            .zip(widths)
            .map(|(c, w)| format!("{c}{}", " ".repeat(w - c.chars().count())))
            .collect();
        println!("| {} |", padded.join(" | "));
    };
    line(header);
    println!("|{}|", widths.map(|w| "-".repeat(w + 2)).join("|"));
    for row in cells {
        line(row);
    }
}
