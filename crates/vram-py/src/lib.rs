//! `vram._vram`: the `vram` command line, in-process, for the Python package (`python/vram`).
//!
//! A thin shell: every call runs the same argv parsing, resolution, computation and rendering
//! as the binary ([`vram::run_cli_captured`]); nothing here knows a formula. Errors become
//! `vram.VramError` carrying the CLI's message and exit code, and a panic is caught here, never
//! unwound into the interpreter.

use std::panic::{catch_unwind, AssertUnwindSafe};

use pyo3::exceptions::PyException;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};

pyo3::create_exception!(
    _vram,
    VramError,
    PyException,
    "A `vram` command failed: the message is the CLI's, `exit_code` its exit status (2 bad input, 1 failure, 3 does not fit)."
);

/// The text of a panic payload.
fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| (*s).to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic".to_string())
}

/// A `VramError(message)` with `exit_code` set.
fn vram_error(py: Python<'_>, message: String, exit_code: u8) -> PyErr {
    let err = VramError::new_err(message);
    if let Err(e) = err.value(py).setattr("exit_code", exit_code) {
        return e;
    }
    err
}

/// `vram` followed by `args`: argv as the binary receives it.
fn argv(args: Vec<String>) -> Vec<String> {
    std::iter::once("vram".to_string()).chain(args).collect()
}

/// Run `vram ARGS…` (without the program name) and return what it printed on stdout; the
/// caller adds `--json`. A failure raises `VramError` with the CLI's message and `exit_code`.
#[pyfunction]
fn run_json(py: Python<'_>, args: Vec<String>) -> PyResult<String> {
    let argv = argv(args);
    // Estimates can search (fit, plan) or fetch headers from the Hub: let other threads run.
    let out = py.allow_threads(|| catch_unwind(AssertUnwindSafe(|| vram::run_cli_captured(argv))));
    match out {
        Ok(c) if c.code == 0 => Ok(c.stdout),
        Ok(c) => Err(vram_error(py, c.error, c.code)),
        Err(p) => Err(vram_error(py, format!("internal error (please report): {}", panic_message(p.as_ref())), 101)),
    }
}

/// The console script: run `vram` on `argv` (`sys.argv`, program name first) exactly as the
/// binary does, printing to the process's stdout/stderr; returns the exit code.
#[pyfunction]
fn main(py: Python<'_>, argv: Vec<String>) -> u8 {
    // Python's buffered sys.stdout/sys.stderr may hold text written before us: flush it first
    // so the order on the terminal is the order of the writes.
    for stream in ["stdout", "stderr"] {
        if let Ok(s) = py.import("sys").and_then(|sys| sys.getattr(stream)) {
            let _ = s.call_method0("flush");
        }
    }
    match py.allow_threads(|| catch_unwind(AssertUnwindSafe(|| vram::run_cli(argv)))) {
        Ok(code) => code,
        Err(p) => {
            eprintln!("error: internal error (please report): {}", panic_message(p.as_ref()));
            101
        }
    }
}

/// The long flags of `vram SUBCOMMAND`, read from the CLI's parser:
/// `[{"long": "seq-len", "aliases": [...], "takes_value": True}, ...]`; `None` for an unknown
/// subcommand. The Python package maps keyword arguments onto these.
#[pyfunction]
fn flags<'py>(py: Python<'py>, subcommand: &str) -> PyResult<Option<Bound<'py, PyList>>> {
    let Some(flags) = vram::flags(subcommand) else { return Ok(None) };
    let list = PyList::empty(py);
    for f in flags {
        let d = PyDict::new(py);
        d.set_item("long", f.long)?;
        d.set_item("aliases", f.aliases)?;
        d.set_item("takes_value", f.takes_value)?;
        list.append(d)?;
    }
    Ok(Some(list))
}

/// The extension module `vram._vram`.
#[pymodule]
fn _vram(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("VramError", m.py().get_type::<VramError>())?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add_function(wrap_pyfunction!(run_json, m)?)?;
    m.add_function(wrap_pyfunction!(main, m)?)?;
    m.add_function(wrap_pyfunction!(flags, m)?)?;
    Ok(())
}
