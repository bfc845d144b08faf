//! `--emit sglang`: the `python -m sglang.launch_server` command line.

use super::launch::{argv, header, shell_word, Launch};
use super::vllm::join_flags;

/// `python -m sglang.launch_server --model-path MODEL --flag value …`.
pub fn command(l: &Launch) -> String {
    let words: Vec<String> = argv(l, true).iter().map(|w| shell_word(w)).collect();
    format!("{}python -m sglang.launch_server {}\n", header(l), join_flags(&words))
}
