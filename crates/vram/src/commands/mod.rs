//! One module per subcommand: arguments → resolved job → core call → render.

pub mod estimate;
pub mod fit;
pub mod lists;
mod llama_env;
pub mod measure;
mod paste;
pub mod plan;
pub mod serve;
pub mod serve_quants;
mod vllm_config;
pub mod web;

use std::cell::RefCell;
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

thread_local! {
    /// Where [`emit`] writes while [`capture`] runs on this thread (in-process callers), else stdout.
    static CAPTURED: RefCell<Option<String>> = const { RefCell::new(None) };
}

/// Run `f` with everything [`emit`] writes collected into a string instead of stdout.
pub fn capture<T>(f: impl FnOnce() -> T) -> (T, String) {
    /// Restores the outer destination even if `f` unwinds.
    struct Restore(Option<Option<String>>);
    impl Drop for Restore {
        fn drop(&mut self) {
            let outer = self.0.take().flatten();
            CAPTURED.with(|c| c.replace(outer));
        }
    }
    let _restore = Restore(Some(CAPTURED.with(|c| c.replace(Some(String::new())))));
    let value = f();
    let text = CAPTURED.with(|c| c.replace(Some(String::new()))).unwrap_or_default();
    (value, text)
}

/// Write to stdout and flush (a closed pipe surfaces as an error `main` treats as success).
pub fn emit(text: &str) -> Result<()> {
    if CAPTURED.with(|c| c.borrow_mut().as_mut().map(|buf| buf.push_str(text)).is_some()) {
        return Ok(());
    }
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
