//! `vram`: how much GPU memory a training or inference job takes, before you launch it.

mod cli;
mod commands;
mod errors;
mod explain;
mod measure;
mod metrics;
mod render;
mod resolve;
mod run;
mod source;
mod tune;
mod watch;

use std::process::ExitCode;

use clap::Parser;

use cli::Cli;

fn main() -> ExitCode {
    let cli = match Cli::try_parse_from(cli::llama_cpp_spellings(std::env::args_os())) {
        Ok(c) => c,
        Err(e) => {
            let code = if e.use_stderr() { 2 } else { 0 };
            let _ = e.print();
            return ExitCode::from(code);
        }
    };
    match commands::dispatch(cli.command) {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            // `vram … | head` closing the pipe is not an error.
            if e.chain().any(|c| c.downcast_ref::<std::io::Error>().is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)) {
                return ExitCode::SUCCESS;
            }
            eprintln!("error: {e:#}");
            ExitCode::from(errors::exit_code(&e))
        }
    }
}
