//! `--emit vllm`: the `vllm serve` command line.

use super::launch::{argv, header, shell_word, Launch};

/// `vllm serve MODEL --flag value …`, one flag per line.
pub fn command(l: &Launch) -> String {
    let words: Vec<String> = argv(l, false).iter().map(|w| shell_word(w)).collect();
    let env: String = l.env.iter().map(|(k, v)| format!("{k}={} ", shell_word(v))).collect();
    format!("{}{env}vllm serve {}\n", header(l), join_flags(&words))
}

/// The model on the first line, then one flag (with its value) per continued line.
pub(super) fn join_flags(words: &[String]) -> String {
    let mut out = words.first().cloned().unwrap_or_default();
    for w in &words[1.min(words.len())..] {
        if w.starts_with('-') {
            out.push_str(" \\\n  ");
        } else {
            out.push(' ');
        }
        out.push_str(w);
    }
    out
}
