//! The CLI's error kinds and their exit codes.

/// A usage or input error (bad flag, unreadable or malformed file): exit code 2.
#[derive(Debug)]
pub struct UsageError(pub String);

impl std::fmt::Display for UsageError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for UsageError {}

/// A usage error as an `anyhow::Error`, for `return Err(usage(...))`.
pub fn usage(msg: impl Into<String>) -> anyhow::Error {
    UsageError(msg.into()).into()
}

/// The job does not fit and the user asked `--fail-if-oom`: exit code 3.
#[derive(Debug)]
pub struct DoesNotFit;

impl std::fmt::Display for DoesNotFit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the job does not fit the GPU (--fail-if-oom)")
    }
}

impl std::error::Error for DoesNotFit {}

/// Exit codes, as documented in `--help` and the README.
pub const EXIT_HELP: &str = "Exit codes: 0 success · 1 failure (network, I/O, a run that failed) · 2 bad usage or input (flag, file, model name) · 3 does not fit (with --fail-if-oom) · `vram run` exits with its command's code.";

/// 2 for bad usage or input (flags, files, names), 3 for `--fail-if-oom`, 1 for anything else.
pub fn exit_code(e: &anyhow::Error) -> u8 {
    if e.chain().any(|c| c.is::<DoesNotFit>()) {
        return 3;
    }
    let input = e.chain().any(|c| c.is::<vram_core::Error>() || c.is::<UsageError>() || c.is::<std::io::Error>());
    if input || e.to_string().contains("is neither a file") || e.to_string().contains("config.json") {
        2
    } else {
        1
    }
}
