//! A small JSON writer for the reports (the library stays free of serialisation crates).

use std::fmt::Write;

/// Escapes `s` as a JSON string literal (with quotes).
pub fn string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// A number as JSON (`null` for NaN and infinities).
pub fn float(v: f64) -> String {
    if v.is_finite() {
        let s = format!("{v}");
        if s.contains(['.', 'e', 'E']) {
            s
        } else {
            format!("{s}.0")
        }
    } else {
        "null".into()
    }
}

/// Builds a JSON object field by field.
#[derive(Debug, Default)]
pub struct Obj {
    out: String,
}

impl Obj {
    /// An empty object.
    pub fn new() -> Obj {
        Obj {
            out: String::from("{"),
        }
    }
    fn key(&mut self, k: &str) {
        if self.out.len() > 1 {
            self.out.push(',');
        }
        self.out.push_str(&string(k));
        self.out.push(':');
    }
    /// An already-encoded JSON value.
    pub fn raw(mut self, k: &str, v: &str) -> Obj {
        self.key(k);
        self.out.push_str(v);
        self
    }
    /// An unsigned integer.
    pub fn u(self, k: &str, v: u64) -> Obj {
        self.raw(k, &v.to_string())
    }
    /// A signed integer.
    pub fn i(self, k: &str, v: i64) -> Obj {
        self.raw(k, &v.to_string())
    }
    /// A float.
    pub fn f(self, k: &str, v: f64) -> Obj {
        self.raw(k, &float(v))
    }
    /// A string.
    pub fn s(self, k: &str, v: &str) -> Obj {
        self.raw(k, &string(v))
    }
    /// A boolean.
    pub fn b(self, k: &str, v: bool) -> Obj {
        self.raw(k, if v { "true" } else { "false" })
    }
    /// An optional unsigned integer (`null` when absent).
    pub fn opt_u(self, k: &str, v: Option<u64>) -> Obj {
        match v {
            Some(v) => self.u(k, v),
            None => self.raw(k, "null"),
        }
    }
    /// An optional string (`null` when absent).
    pub fn opt_s(self, k: &str, v: Option<&str>) -> Obj {
        match v {
            Some(v) => self.s(k, v),
            None => self.raw(k, "null"),
        }
    }
    /// The finished object.
    pub fn end(mut self) -> String {
        self.out.push('}');
        self.out
    }
}

/// A JSON array of already-encoded values.
pub fn array<I: IntoIterator<Item = String>>(items: I) -> String {
    let mut out = String::from("[");
    for (i, v) in items.into_iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str(&v);
    }
    out.push(']');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_valid_json() {
        let j = Obj::new()
            .u("a", 1)
            .s("b", "x\"y\n\u{1}")
            .f("c", 0.5)
            .f("d", f64::NAN)
            .f("e", 2.0)
            .opt_u("f", None)
            .raw("g", &array(["1".to_string(), "2".to_string()]))
            .b("h", true)
            .end();
        assert_eq!(
            j,
            r#"{"a":1,"b":"x\"y\n\u0001","c":0.5,"d":null,"e":2.0,"f":null,"g":[1,2],"h":true}"#
        );
    }
}
