//! JSON helpers shared by every layer.
//!
//! serde_json is built with `preserve_order` (key order as logged) and
//! `arbitrary_precision` (numbers keep their logged spelling), so re-printing an
//! event never reorders keys or re-formats numbers.

use serde_json::{Map, Value};

/// A JSON object, keys in logged order: an event, its `data`, a header.
pub type JsonMap = Map<String, Value>;

/// The largest integer JavaScript represents exactly (2^53 - 1).
pub const MAX_SAFE_INTEGER: i64 = 9_007_199_254_740_991;

/// An integral number within the JS safe range, accepting `5`, `5.0` and `5e0`
/// as the Harness's JS reader does.
pub fn safe_integer(value: &Value) -> Option<i64> {
    let Value::Number(number) = value else {
        return None;
    };
    if let Some(i) = number.as_i64() {
        return (i.abs() <= MAX_SAFE_INTEGER).then_some(i);
    }
    let float: f64 = number.to_string().parse().ok()?;
    if float.fract() != 0.0 || float.abs() > MAX_SAFE_INTEGER as f64 {
        return None;
    }
    Some(float as i64)
}

/// A safe integer that is zero or more. `-0` is accepted like JS accepts it.
pub fn non_negative_safe_integer(value: &Value) -> Option<u64> {
    safe_integer(value).and_then(|i| u64::try_from(i).ok())
}

/// True for the number token `-0` (or `-0.0`), which some header fields refuse.
pub fn is_negative_zero(value: &Value) -> bool {
    matches!(value, Value::Number(n) if n.to_string().starts_with('-') && safe_integer(value) == Some(0))
}

/// Pretty JSON (two-space indent, as `JSON.stringify(v, null, 2)`), with a trailing newline.
pub fn pretty_line(value: &impl serde::Serialize) -> Vec<u8> {
    let mut out = serde_json::to_vec_pretty(value).unwrap_or_default();
    out.push(b'\n');
    out
}

/// Compact JSON with a trailing newline: one JSONL line. U+2028 and U+2029 are
/// written as escapes: JSON allows them raw inside strings, but line splitters
/// such as Python's `str.splitlines` would cut the line there.
pub fn compact_line(value: &impl serde::Serialize) -> Vec<u8> {
    let mut out = Vec::new();
    compact_line_into(value, &mut out);
    out
}

/// [`compact_line`] appended to `out`: many lines into one buffer, with no
/// allocation per line.
pub fn compact_line_into(value: &impl serde::Serialize, out: &mut Vec<u8>) {
    let start = out.len();
    if serde_json::to_writer(&mut *out, value).is_err() {
        out.truncate(start);
    }
    // Both separators start with the byte 0xE2: without one, the line is done.
    if out[start..].contains(&0xE2) {
        let raw = out.split_off(start);
        let mut rest = &raw[..];
        while let Some(at) = (0..rest.len()).find(|&at| {
            rest[at] == 0xE2 && matches!(rest.get(at + 1..at + 3), Some([0x80, 0xA8 | 0xA9]))
        }) {
            out.extend_from_slice(&rest[..at]);
            out.extend_from_slice(if rest[at + 2] == 0xA8 {
                b"\\u2028"
            } else {
                b"\\u2029"
            });
            rest = &rest[at + 3..];
        }
        out.extend_from_slice(rest);
    }
    out.push(b'\n');
}

/// A string field of an object, if present and a string.
pub fn str_field<'a>(map: &'a JsonMap, key: &str) -> Option<&'a str> {
    map.get(key).and_then(Value::as_str)
}

/// Writes a JSON value with object keys sorted recursively, so that two values that
/// differ only in key order produce the same text (deep equality ignoring order).
pub fn canonical_text(value: &Value, out: &mut String) {
    match value {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            out.push('{');
            for (i, key) in keys.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String((*key).clone()).to_string());
                out.push(':');
                canonical_text(&map[key.as_str()], out);
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                canonical_text(item, out);
            }
            out.push(']');
        }
        Value::Number(n) => {
            // Numbers compare by value: 5, 5.0 and 5e0 are the same JS number.
            match n.to_string().parse::<f64>() {
                Ok(f) if f.fract() == 0.0 && f.abs() <= MAX_SAFE_INTEGER as f64 => {
                    out.push_str(&(f as i64).to_string())
                }
                _ => out.push_str(&n.to_string()),
            }
        }
        other => out.push_str(&other.to_string()),
    }
}

/// Deep equality of two JSON values, ignoring object key order.
pub fn deep_equal(a: &Value, b: &Value) -> bool {
    let (mut x, mut y) = (String::new(), String::new());
    canonical_text(a, &mut x);
    canonical_text(b, &mut y);
    x == y
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn safe_integers_accept_js_spellings() {
        let v: Value =
            serde_json::from_str("[5, 5.0, 5e0, -3, 1.5, 9007199254740992, -0]").unwrap();
        let got: Vec<Option<i64>> = v.as_array().unwrap().iter().map(safe_integer).collect();
        assert_eq!(
            got,
            vec![Some(5), Some(5), Some(5), Some(-3), None, None, Some(0)]
        );
        assert!(is_negative_zero(&v[6]));
        assert!(!is_negative_zero(&v[0]));
    }

    #[test]
    fn numbers_keep_their_spelling_and_keys_their_order() {
        let text = r#"{"z":1,"a":0.000001,"m":[1e+21]}"#;
        let v: Value = serde_json::from_str(text).unwrap();
        assert_eq!(serde_json::to_string(&v).unwrap(), text);
    }

    #[test]
    fn jsonl_lines_escape_line_separators() {
        let v = json!({"text": "a\u{2028}b\u{2029}c"});
        let line = compact_line(&v);
        assert_eq!(line, b"{\"text\":\"a\\u2028b\\u2029c\"}\n");
        let back: Value = serde_json::from_slice(&line).unwrap();
        assert_eq!(back, v);
        // Other characters that start with the byte 0xE2 stay as they are.
        let v = json!({"text": "€…\u{2028}"});
        assert_eq!(compact_line(&v), "{\"text\":\"€…\\u2028\"}\n".as_bytes());
        let v = json!({"text": "€ and …"});
        assert_eq!(compact_line(&v), "{\"text\":\"€ and …\"}\n".as_bytes());
    }

    #[test]
    fn deep_equal_ignores_key_order_only() {
        assert!(deep_equal(
            &json!({"a": 1, "b": [1, {"c": 2, "d": 3}]}),
            &json!({"b": [1, {"d": 3, "c": 2}], "a": 1})
        ));
        assert!(!deep_equal(&json!({"a": [1, 2]}), &json!({"a": [2, 1]})));
    }
}
