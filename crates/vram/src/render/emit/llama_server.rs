//! `--emit llama-server`: the llama.cpp server command line.

use super::launch::{argv, header, shell_word, Launch};
use super::vllm::join_flags;

/// `llama-server -m FILE|-hf org/name:QUANT --flag value …`, one flag per line.
pub fn command(l: &Launch) -> String {
    let words: Vec<String> = argv(l, true).iter().map(|w| shell_word(w)).collect();
    format!("{}llama-server {}\n", header(l), join_flags(&words))
}
