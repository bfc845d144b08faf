//! `vram`: how much GPU memory a training or inference job takes, before you launch it.

use std::process::ExitCode;

fn main() -> ExitCode {
    ExitCode::from(vram::run_cli(std::env::args_os()))
}
