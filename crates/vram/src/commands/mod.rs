//! One module per subcommand: arguments → resolved job → core call → render.

pub mod estimate;
pub mod fit;
pub mod lists;
pub mod measure;
mod paste;
pub mod plan;
pub mod serve;
pub mod web;

use std::io::Write;

use anyhow::Result;

use crate::cli::Command;

/// Run a subcommand; the value is the process exit code.
pub fn dispatch(command: Command) -> Result<u8> {
    match command {
        Command::Estimate(a) => estimate::run(&a).map(|()| 0),
        Command::Fit(a) => fit::run(&a).map(|()| 0),
        Command::Plan(a) => plan::run(&a).map(|()| 0),
        Command::Serve(a) => serve::run(&a).map(|()| 0),
        Command::Models(a) => lists::models(&a).map(|()| 0),
        Command::Gpus(a) => lists::gpus(&a).map(|()| 0),
        Command::Run(a) => measure::run(a),
        Command::Tune(a) => measure::tune(a),
        Command::Watch(a) => measure::watch(&a).map(|()| 0),
        Command::Explain(a) => crate::explain::run(a).map(|()| 0),
        Command::Web(a) => web::run(&a).map(|()| 0),
    }
}

/// Write to stdout and flush (a closed pipe surfaces as an error `main` treats as success).
pub fn emit(text: &str) -> Result<()> {
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes())?;
    out.flush()?;
    Ok(())
}

/// Pretty JSON and a newline.
pub fn emit_json(v: &serde_json::Value) -> Result<()> {
    emit(&format!("{}\n", serde_json::to_string_pretty(v)?))
}

/// Print a report as JSON or as text; only the chosen renderer runs.
pub fn show(json: bool, as_json: impl FnOnce() -> serde_json::Value, as_text: impl FnOnce() -> String) -> Result<()> {
    if json {
        emit_json(&as_json())
    } else {
        emit(&as_text())
    }
}
