//! Errors of the core crate. Every variant says what is wrong and how to fix it.

use thiserror::Error;

/// Result with the core [`enum@Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong while reading a model or computing an estimate.
#[derive(Debug, Error, Clone, PartialEq)]
#[non_exhaustive]
pub enum Error {
    /// A config.json could not be parsed as JSON.
    #[error("{file} is not valid JSON: {message}")]
    Json {
        /// Which file.
        file: String,
        /// The parser's message.
        message: String,
    },
    /// A key the estimate needs is absent from the config.
    #[error("{file} has no `{key}`; it is needed to {why} (add it, or pass a complete Hugging Face config.json)")]
    MissingKey {
        /// Which file.
        file: String,
        /// The missing key.
        key: String,
        /// What it is needed for.
        why: String,
    },
    /// A key holds a value that cannot describe a real model.
    #[error("{file}: `{key}` = {value} is not usable: {hint}")]
    BadKey {
        /// Which file.
        file: String,
        /// The key.
        key: String,
        /// Its value as written.
        value: String,
        /// What would be valid.
        hint: String,
    },
    /// The config describes an architecture vram does not model (unknown, or a known family
    /// that is not a decoder-only causal LM).
    #[error("{file}: {what} is not supported: {reason}. Supported model types: {}. To estimate it anyway as a Llama-style decoder (RMSNorm, SwiGLU, rotary; marked APPROXIMATE), pass --approximate-architecture", .supported.join(", "))]
    UnsupportedArchitecture {
        /// Which file.
        file: String,
        /// What was found (`model_type \`bert\``, `architecture \`LlamaForSequenceClassification\``).
        what: String,
        /// The config's `model_type` (empty when absent).
        model_type: String,
        /// Why it cannot be estimated (`encoder models are not supported yet`).
        reason: String,
        /// The `model_type`s vram reads natively.
        supported: Vec<&'static str>,
    },
    /// A file given as a config.json is another kind of file (GGUF, safetensors, pickle …).
    #[error("{file} is {kind}, not a config.json: {hint}")]
    NotAConfig {
        /// Which file.
        file: String,
        /// What it is (`a GGUF file`), from [`crate::sniff::sniff`].
        kind: String,
        /// What to pass instead.
        hint: String,
    },
    /// A safetensors header is malformed or hostile.
    #[error("{file}: bad safetensors header: {message}")]
    Safetensors {
        /// Which file.
        file: String,
        /// What is wrong.
        message: String,
    },
    /// A GGUF header is malformed or hostile.
    #[error("{file}: bad GGUF header: {message}")]
    Gguf {
        /// Which file.
        file: String,
        /// What is wrong.
        message: String,
    },
    /// A user-supplied value (flag) is out of range or not understood.
    #[error("invalid {what} `{value}`: {hint}")]
    InvalidValue {
        /// What the value is for.
        what: String,
        /// The value as given.
        value: String,
        /// What would be valid.
        hint: String,
    },
    /// A preset or GPU name that is not in the catalogue.
    #[error("unknown {what} `{name}`{}", suggest(.suggestions))]
    Unknown {
        /// "model preset" or "GPU".
        what: String,
        /// The name as given.
        name: String,
        /// The closest known names.
        suggestions: Vec<String>,
    },
    /// The numbers overflow 64/128-bit arithmetic: the job is absurdly large.
    #[error("arithmetic overflow computing {what}: the job is too large to describe (check batch size, sequence length and model size)")]
    Overflow {
        /// Which quantity.
        what: String,
    },
    /// An unknown architecture whose files say too little for even an approximate estimate.
    #[error("{source_name}: too little is known to estimate it even approximately; missing: {missing}")]
    NotEnoughStructure {
        /// The model directory, Hub id or file.
        source_name: String,
        /// What is missing and where it could come from.
        missing: String,
    },
    /// A pasted start-up log holds none of the lines vram reads.
    #[error("the log has none of the start-up lines vram reads; expected one of: {expected}")]
    NotAStartupLog {
        /// The lines looked for, by engine.
        expected: String,
    },
}

fn suggest(s: &[String]) -> String {
    if s.is_empty() {
        String::new()
    } else {
        format!("; did you mean {}?", s.join(", "))
    }
}

/// Levenshtein distance, for "did you mean" suggestions.
pub(crate) fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1; b.len() + 1];
        for (j, cb) in b.iter().enumerate() {
            let cost = usize::from(ca != *cb);
            cur[j + 1] = (prev[j] + cost).min(prev[j + 1] + 1).min(cur[j] + 1);
        }
        prev = cur;
    }
    prev[b.len()]
}

/// The up-to-three known names closest to `name` (substring matches first).
pub(crate) fn nearest<'a>(name: &str, known: impl Iterator<Item = &'a str>) -> Vec<String> {
    let name = name.to_ascii_lowercase();
    let mut scored: Vec<(usize, &str)> = known
        .map(|k| {
            let d = if k.contains(&name) || name.contains(k) { 0 } else { edit_distance(&name, k) };
            (d, k)
        })
        .collect();
    scored.sort();
    let limit = (name.len() / 2).max(3);
    scored.into_iter().filter(|(d, _)| *d <= limit).take(3).map(|(_, k)| k.to_string()).collect()
}
