//! A request's fields, read one by one and removed, so whatever is left over is a key nobody
//! reads: an error naming it, never a silently ignored setting.
//!
//! The page forwards URL query values as strings, so every numeric and boolean field accepts a
//! JSON number/boolean or its text (`"4096"`, `"true"`). `null` and `""` mean "not given" (a form
//! field left at its default), exactly as a CLI flag left out.

use serde_json::{Map, Value};

use crate::RequestError;

/// The fields of one request, consumed as they are read.
pub struct Fields {
    map: Map<String, Value>,
}

type R<T> = Result<T, RequestError>;

impl Fields {
    /// Wrap a request object.
    pub fn new(map: Map<String, Value>) -> Fields {
        Fields { map }
    }

    /// Whether `key` was given (not absent, null or empty), without consuming it.
    pub fn has(&self, key: &str) -> bool {
        self.map.get(key).is_some_and(|v| !is_empty(v))
    }

    /// Take a value; `None` when absent, null or an empty string.
    fn take(&mut self, key: &str) -> Option<Value> {
        self.map.remove(key).filter(|v| !is_empty(v))
    }

    /// A text field. Numbers are accepted as their decimal text (a preset name is never numeric,
    /// but `max_model_len: 4096` is both).
    pub fn str(&mut self, key: &str) -> R<Option<String>> {
        match self.take(key) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.trim().to_string())),
            Some(Value::Number(n)) => Ok(Some(n.to_string())),
            Some(v) => Err(RequestError::new(format!("`{key}` must be text, not {}", kind(&v)))),
        }
    }

    /// A whole number ≥ 0 (`4096`, `"4096"`, `"4_096"`).
    pub fn u64(&mut self, key: &str) -> R<Option<u64>> {
        let bad = |v: &str| RequestError::new(format!("`{key}` = {v} is not a whole number"));
        match self.take(key) {
            None => Ok(None),
            Some(Value::Number(n)) => n.as_u64().map(Some).ok_or_else(|| bad(&n.to_string())),
            Some(Value::String(s)) => s.trim().replace('_', "").parse().map(Some).map_err(|_| bad(&format!("`{s}`"))),
            Some(v) => Err(bad(kind(&v))),
        }
    }

    /// A finite number (`0.9`, `"0.9"`).
    pub fn f64(&mut self, key: &str) -> R<Option<f64>> {
        let bad = |v: &str| RequestError::new(format!("`{key}` = {v} is not a number"));
        let x = match self.take(key) {
            None => return Ok(None),
            Some(Value::Number(n)) => n.as_f64().ok_or_else(|| bad(&n.to_string()))?,
            Some(Value::String(s)) => s.trim().parse::<f64>().map_err(|_| bad(&format!("`{s}`")))?,
            Some(v) => return Err(bad(kind(&v))),
        };
        if x.is_finite() {
            Ok(Some(x))
        } else {
            Err(bad(&x.to_string()))
        }
    }

    /// A JSON object, given as one or as its text (a form field).
    pub fn object(&mut self, key: &str) -> R<Option<Value>> {
        match self.take(key) {
            None => Ok(None),
            Some(v @ Value::Object(_)) => Ok(Some(v)),
            Some(Value::String(s)) => match serde_json::from_str::<Value>(&s) {
                Ok(v @ Value::Object(_)) => Ok(Some(v)),
                _ => Err(RequestError::new(format!("`{key}` = `{s}` is not a JSON object"))),
            },
            Some(v) => Err(RequestError::new(format!("`{key}` must be a JSON object, not {}", kind(&v)))),
        }
    }

    /// A boolean (`true`, `"true"`, `"1"`, `"yes"`, `"on"` and their opposites), as the CLI reads them.
    pub fn bool(&mut self, key: &str) -> R<Option<bool>> {
        match self.take(key) {
            None => Ok(None),
            Some(Value::Bool(b)) => Ok(Some(b)),
            Some(Value::String(s)) => match s.trim().to_ascii_lowercase().as_str() {
                "true" | "1" | "yes" | "on" => Ok(Some(true)),
                "false" | "0" | "no" | "off" => Ok(Some(false)),
                _ => Err(RequestError::new(format!("`{key}` = `{s}` is not a boolean: use true or false"))),
            },
            Some(v) => Err(RequestError::new(format!("`{key}` must be true or false, not {}", kind(&v)))),
        }
    }

    /// Error on any key left unread, naming the ones this operation reads.
    pub fn finish(self, op: &str, known: &[&str]) -> R<()> {
        // A leftover key with no value sets nothing (an empty form field): only real settings count.
        let mut left: Vec<&String> = self.map.iter().filter(|(_, v)| !is_empty(v)).map(|(k, _)| k).collect();
        if left.is_empty() {
            return Ok(());
        }
        left.sort();
        let names: Vec<String> = left.iter().map(|k| format!("`{k}`")).collect();
        Err(RequestError::new(format!(
            "{} {} not read by `{op}` (it reads: {})",
            names.join(", "),
            if names.len() == 1 { "is" } else { "are" },
            known.join(", ")
        )))
    }
}

fn is_empty(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::String(s) => s.trim().is_empty(),
        _ => false,
    }
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "text",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}
