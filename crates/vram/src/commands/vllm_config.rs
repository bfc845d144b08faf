//! vLLM's `--config FILE.yaml` (vllm/utils/argparse_utils.py `load_config_file`): each top-level
//! key becomes a flag, in the order the file gives them. `true` is the bare switch, `false` its
//! `--no-` form (vLLM adds it only where its parser has one; vram always writes it, and the paste
//! lists a `--no-` form it does not know as not understood), a list the flag followed by its items, a mapping one JSON argument
//! (`compilation-config: {cudagraph_mode: NONE}` → `--compilation-config '{"cudagraph_mode":"NONE"}'`),
//! anything else its text.
//!
//! vLLM reads the file with PyYAML; vram reads the part of YAML such files use: `key: value`
//! lines, comments, quoted strings, flow lists `[a, b]` and block lists (`- a`), nested block
//! mappings, and flow mappings written as JSON. Anchors, multi-line strings and the like are
//! refused with the line, never guessed.

use anyhow::Result;

use crate::errors::UsageError;

/// A YAML value of the subset read here.
#[derive(Debug, Clone, PartialEq)]
enum Value {
    Bool(bool),
    Null,
    /// A number or a string, as its text (unquoted).
    Scalar {
        text: String,
        quoted: bool,
    },
    List(Vec<Value>),
    Map(Vec<(String, Value)>),
}

impl Value {
    /// JSON text of the value (a nested mapping or list becomes one JSON argument).
    fn json(&self) -> String {
        match self {
            Value::Bool(b) => b.to_string(),
            Value::Null => "null".into(),
            Value::Scalar { text, quoted } => {
                if !quoted && text.parse::<f64>().is_ok_and(f64::is_finite) {
                    text.clone()
                } else {
                    serde_json::Value::String(text.clone()).to_string()
                }
            }
            Value::List(items) => format!("[{}]", items.iter().map(Value::json).collect::<Vec<_>>().join(",")),
            Value::Map(entries) => format!(
                "{{{}}}",
                entries.iter().map(|(k, v)| format!("{}:{}", serde_json::Value::String(k.clone()), v.json())).collect::<Vec<_>>().join(",")
            ),
        }
    }

    /// The text argparse receives for a list item (`str(item)` in vLLM).
    fn arg(&self) -> String {
        match self {
            Value::Scalar { text, .. } => text.clone(),
            Value::Bool(true) => "True".into(),
            Value::Bool(false) => "False".into(),
            Value::Null => "None".into(),
            other => other.json(),
        }
    }
}

/// The flags a vLLM config file stands for, in its order.
pub fn args(path: &str, text: &str) -> Result<Vec<String>> {
    if !(path.ends_with(".yaml") || path.ends_with(".yml")) {
        return Err(UsageError(format!("--config {path}: vLLM reads a .yaml or .yml config file")).into());
    }
    let lines = lines(text);
    let (map, used) = mapping(path, &lines, 0, 0)?;
    if let Some(l) = lines.get(used) {
        return Err(bad(path, l, "is indented less than the keys before it").into());
    }
    let mut out = Vec::new();
    for (key, value) in map {
        let flag = format!("--{key}");
        match value {
            Value::Bool(true) => out.push(flag),
            // vLLM adds `--no-KEY` where its parser has it; the paste reads the ones vram knows and
            // lists the rest as not understood, never dropped.
            Value::Bool(false) => out.push(format!("--no-{key}")),
            Value::Null => {}
            Value::List(items) if items.is_empty() => {}
            Value::List(items) => {
                out.push(flag);
                out.extend(items.iter().map(Value::arg));
            }
            Value::Map(_) => out.extend([flag, value.json()]),
            Value::Scalar { text, .. } => out.extend([flag, text]),
        }
    }
    Ok(out)
}

/// One meaningful line: its number (from 1), indentation and text without the comment.
struct Line<'a> {
    number: usize,
    indent: usize,
    text: &'a str,
}

fn lines(text: &str) -> Vec<Line<'_>> {
    text.lines()
        .enumerate()
        .filter_map(|(i, raw)| {
            let body = strip_comment(raw).trim_end();
            let text = body.trim_start();
            (!text.is_empty() && text != "---").then(|| Line { number: i + 1, indent: body.len() - text.len(), text })
        })
        .collect()
}

/// The line without a `#` comment (a `#` inside quotes, or not after a space, is text).
fn strip_comment(raw: &str) -> &str {
    let mut quote = None;
    let mut prev = ' ';
    for (i, c) in raw.char_indices() {
        match (quote, c) {
            (None, '"' | '\'') => quote = Some(c),
            (Some(q), c) if c == q => quote = None,
            (None, '#') if prev == ' ' || prev == '\t' => return &raw[..i],
            _ => {}
        }
        prev = c;
    }
    raw
}

fn bad(path: &str, l: &Line, what: &str) -> UsageError {
    UsageError(format!(
        "--config {path}, line {}: `{}` {what}; vram reads YAML's key: value lines, lists and nested mappings (as vLLM's config files use them)",
        l.number, l.text
    ))
}

/// The mapping whose keys start at `indent`, from line `from`: its entries and the next line.
fn mapping(path: &str, lines: &[Line], from: usize, indent: usize) -> Result<(Vec<(String, Value)>, usize)> {
    let mut out: Vec<(String, Value)> = Vec::new();
    let mut i = from;
    while let Some(l) = lines.get(i) {
        if l.indent < indent {
            break;
        }
        if l.indent > indent {
            return Err(bad(path, l, "is indented more than the keys before it").into());
        }
        let Some((key, rest)) = split_key(l.text) else {
            return Err(bad(path, l, "is not `key: value`").into());
        };
        if out.iter().any(|(k, _)| *k == key) {
            return Err(bad(path, l, "repeats a key").into());
        }
        i += 1;
        let value = if rest.is_empty() {
            // A nested block: a list (`- item`) or a mapping, indented under the key; else null.
            match lines.get(i) {
                Some(n) if n.text.starts_with("- ") || n.text == "-" => {
                    let (items, next) = block_list(path, lines, i, n.indent)?;
                    i = next;
                    Value::List(items)
                }
                Some(n) if n.indent > indent => {
                    let (m, next) = mapping(path, lines, i, n.indent)?;
                    i = next;
                    Value::Map(m)
                }
                _ => Value::Null,
            }
        } else {
            scalar_or_flow(rest).ok_or_else(|| bad(path, l, "has a value vram does not read"))?
        };
        out.push((key, value));
    }
    Ok((out, i))
}

/// `- item` lines at `indent` (scalars or flow values).
fn block_list(path: &str, lines: &[Line], from: usize, indent: usize) -> Result<(Vec<Value>, usize)> {
    let mut items = Vec::new();
    let mut i = from;
    while let Some(l) = lines.get(i).filter(|l| l.indent == indent && (l.text.starts_with("- ") || l.text == "-")) {
        let item = l.text[1..].trim();
        let read = scalar_or_flow(item).filter(|_| !item.is_empty() && split_key(item).is_none());
        items.push(read.ok_or_else(|| bad(path, l, "is a list item vram does not read"))?);
        i += 1;
    }
    if let Some(l) = lines.get(i).filter(|l| l.indent > indent) {
        return Err(bad(path, l, "nests under a list item, which vram does not read").into());
    }
    Ok((items, i))
}

/// `key: rest` (a quoted key too); `None` when the line has no key.
fn split_key(text: &str) -> Option<(String, &str)> {
    let (key, rest) = if let Some(q @ ('"' | '\'')) = text.chars().next() {
        let end = text[1..].find(q)? + 1;
        let rest = text[end + 1..].trim_start().strip_prefix(':')?;
        (text[1..end].to_string(), rest)
    } else {
        let colon = text.find(": ").or_else(|| text.ends_with(':').then(|| text.len() - 1))?;
        (text[..colon].trim().to_string(), &text[colon + 1..])
    };
    (!key.is_empty() && !key.starts_with(['-', '[', '{', '&', '*', '!', '|', '>'])).then_some((key, rest.trim()))
}

/// A scalar (YAML 1.1's booleans and nulls as PyYAML reads them), a flow list of scalars, or a
/// flow mapping written as JSON. `None` for what this subset does not read.
fn scalar_or_flow(text: &str) -> Option<Value> {
    let t = text.trim();
    if t.starts_with('{') {
        return serde_json::from_str::<serde_json::Value>(t)
            .ok()
            .filter(serde_json::Value::is_object)
            .map(|_| Value::Scalar { text: t.to_string(), quoted: true });
    }
    if let Some(inner) = t.strip_prefix('[') {
        let inner = inner.strip_suffix(']')?.trim();
        if inner.is_empty() {
            return Some(Value::List(Vec::new()));
        }
        return inner.split(',').map(|item| scalar(item.trim())).collect::<Option<Vec<_>>>().map(Value::List);
    }
    scalar(t)
}

fn scalar(t: &str) -> Option<Value> {
    if let Some(q @ ('"' | '\'')) = t.chars().next() {
        let inner = t.strip_prefix(q)?.strip_suffix(q)?;
        if inner.contains(q) || (q == '"' && inner.contains('\\')) {
            return None;
        }
        return Some(Value::Scalar { text: inner.to_string(), quoted: true });
    }
    if t.is_empty() || t.starts_with(['&', '*', '!', '|', '>', '[', '{', '@', '`']) {
        return None;
    }
    Some(match t {
        "true" | "True" | "TRUE" | "yes" | "Yes" | "YES" | "on" | "On" | "ON" => Value::Bool(true),
        "false" | "False" | "FALSE" | "no" | "No" | "NO" | "off" | "Off" | "OFF" => Value::Bool(false),
        "null" | "Null" | "NULL" | "~" => Value::Null,
        _ => Value::Scalar { text: t.to_string(), quoted: false },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_yaml_vllm_config_files_use() {
        let text = r#"
# served on two GPUs
model: meta-llama/Llama-3.1-8B-Instruct
tensor-parallel-size: 2
max_model_len: 32k   # vLLM's own integers
gpu-memory-utilization: 0.9
enable-prefix-caching: true
enforce-eager: false
served-model-name: [llama, "llama 8b"]
cudagraph-capture-sizes:
  - 1
  - 2
compilation-config:
  cudagraph_mode: NONE
  pass_config:
    fuse_norm_quant: yes
api-key: "a#b"
"#;
        assert_eq!(
            args("c.yaml", text).unwrap(),
            [
                "--model",
                "meta-llama/Llama-3.1-8B-Instruct",
                "--tensor-parallel-size",
                "2",
                "--max_model_len",
                "32k",
                "--gpu-memory-utilization",
                "0.9",
                "--enable-prefix-caching",
                "--no-enforce-eager",
                "--served-model-name",
                "llama",
                "llama 8b",
                "--cudagraph-capture-sizes",
                "1",
                "2",
                "--compilation-config",
                r#"{"cudagraph_mode":"NONE","pass_config":{"fuse_norm_quant":true}}"#,
                "--api-key",
                "a#b",
            ]
        );
    }

    #[test]
    fn refuses_what_it_does_not_read_with_the_line() {
        for (text, line) in [
            ("a: 1\n  b: 2\n", 2),
            ("a: &x 1\n", 1),
            ("a: |\n  text\n", 1),
            ("just text\n", 1),
            ("a: 1\na: 2\n", 2),
            ("a:\n  - b: 1\n", 2),
            ("a:\n  - 1\n    - 2\n", 3),
        ] {
            let e = args("c.yaml", text).unwrap_err().to_string();
            assert!(e.contains(&format!("line {line}:")), "{text:?}: {e}");
        }
        assert!(args("c.json", "a: 1").unwrap_err().to_string().contains(".yaml"));
    }
}
