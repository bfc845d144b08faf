//! `vram` as a library: exactly what the `vram` binary runs on an argv, callable in-process.
//!
//! `main.rs` is [`run_cli`] on the process arguments; the Python package (`crates/vram-py`) calls
//! [`run_cli_captured`] with `--json` so that its results come from the same parsing, resolution,
//! computation and rendering as the command line, never a second implementation.

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

use std::ffi::OsString;

use clap::{CommandFactory, Parser};

use cli::Cli;

/// Run the command line on `args` (`args[0]` is the program name), printing as the binary does;
/// the value is the process exit code.
pub fn run_cli<I, T>(args: I) -> u8
where
    I: IntoIterator<Item = T>,
    T: Into<OsString>,
{
    let cli = match Cli::try_parse_from(cli::llama_cpp_spellings(args.into_iter().map(Into::into))) {
        Ok(c) => c,
        Err(e) => {
            let code = if e.use_stderr() { 2 } else { 0 };
            let _ = e.print();
            return code;
        }
    };
    match commands::dispatch(cli.command) {
        Ok(code) => code,
        Err(e) => {
            // `vram … | head` closing the pipe is not an error.
            if e.chain().any(|c| c.downcast_ref::<std::io::Error>().is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)) {
                return 0;
            }
            eprintln!("error: {e:#}");
            errors::exit_code(&e)
        }
    }
}

/// What one in-process run produced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Captured {
    /// The exit code the binary would have returned.
    pub code: u8,
    /// The report the command wrote to stdout (help and version text included).
    pub stdout: String,
    /// The error the binary would have printed after `error: ` (usage errors include clap's
    /// usage lines), or empty on success.
    pub error: String,
}

/// Run the command line on `args` like [`run_cli`], but return the report and the error instead of
/// printing them. Progress lines (Hub downloads, `vram run`/`tune` logs) still go to stderr.
pub fn run_cli_captured<I, T>(args: I) -> Captured
where
    I: IntoIterator<Item = T>,
    T: Into<OsString>,
{
    let cli = match Cli::try_parse_from(cli::llama_cpp_spellings(args.into_iter().map(Into::into))) {
        Ok(c) => c,
        Err(e) => {
            let text = e.render().to_string();
            return if e.use_stderr() {
                let error = text.strip_prefix("error: ").unwrap_or(&text).trim_end().to_string();
                Captured { code: 2, stdout: String::new(), error }
            } else {
                Captured { code: 0, stdout: text, error: String::new() }
            };
        }
    };
    let (result, stdout) = commands::capture(|| commands::dispatch(cli.command));
    match result {
        Ok(code) => Captured { code, stdout, error: String::new() },
        Err(e) => Captured { code: errors::exit_code(&e), stdout, error: format!("{e:#}") },
    }
}

/// One long flag of a subcommand, as clap parses it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Flag {
    /// The long name, without dashes (`seq-len`).
    pub long: String,
    /// Its other long spellings (`max-seq-length`, `per_device_train_batch_size`).
    pub aliases: Vec<String>,
    /// Whether it takes a value (`--seq-len 4096`) or is a bare switch (`--fused-cross-entropy`).
    pub takes_value: bool,
}

/// The long flags `vram <subcommand>` accepts, read from the parser itself (so callers such as
/// the Python package map keywords onto flags without keeping a second list); `None` for an
/// unknown subcommand.
pub fn flags(subcommand: &str) -> Option<Vec<Flag>> {
    let cmd = Cli::command();
    let sub = cmd.find_subcommand(subcommand)?;
    Some(
        sub.get_arguments()
            .filter_map(|a| {
                let long = a.get_long()?.to_string();
                let aliases = a.get_all_aliases().unwrap_or_default().into_iter().map(str::to_string).collect();
                Some(Flag { long, aliases, takes_value: a.get_action().takes_values() })
            })
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::{flags, run_cli_captured};

    #[test]
    fn a_captured_run_returns_the_report_the_error_and_the_exit_code() {
        let ok = run_cli_captured(["vram", "gpus", "--json"]);
        assert_eq!((ok.code, ok.error.as_str()), (0, ""));
        let gpus: serde_json::Value = serde_json::from_str(&ok.stdout).expect("the report is JSON");
        assert!(gpus.as_array().is_some_and(|a| !a.is_empty()));

        let bad = run_cli_captured(["vram", "estimate", "--model", "qwen2.5-1.5b", "--precision", "fp12", "--json"]);
        assert_eq!(bad.code, 2);
        assert!(bad.error.starts_with("invalid precision `fp12`"), "{}", bad.error);
        assert!(bad.stdout.is_empty());

        let usage = run_cli_captured(["vram", "estimate", "--bogus"]);
        assert_eq!(usage.code, 2);
        assert!(usage.error.starts_with("unexpected argument '--bogus' found"), "{}", usage.error);

        let version = run_cli_captured(["vram", "--version"]);
        assert_eq!((version.code, version.stdout.trim()), (0, concat!("vram ", env!("CARGO_PKG_VERSION"))));
    }

    #[test]
    fn captures_do_not_leak_into_the_next_run() {
        let first = run_cli_captured(["vram", "models", "--json"]);
        let second = run_cli_captured(["vram", "models", "--json"]);
        assert_eq!(first, second);
    }

    #[test]
    fn flags_are_read_from_the_parser_with_their_aliases() {
        let estimate = flags("estimate").expect("a subcommand");
        let find = |long: &str| estimate.iter().find(|f| f.long == long).unwrap_or_else(|| panic!("--{long}"));
        assert!(find("seq-len").takes_value);
        assert!(find("seq-len").aliases.iter().any(|a| a == "max-seq-length"));
        assert!(find("batch-size").aliases.iter().any(|a| a == "per_device_train_batch_size"));
        assert!(!find("fused-cross-entropy").takes_value);
        assert!(flags("no-such-command").is_none());
    }
}
