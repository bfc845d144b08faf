//! A measurement taken by the Python package (`vram.measure`: any `nn.Module` with an example
//! input, run under FakeTensorMode on the CPU, every storage tracked) read back as a job
//! description: its allocated peak by category, to which the device-level terms the
//! measurement cannot see are added (caching-allocator reserve, CUDA context, cuBLAS
//! workspace), the same components `estimate` adds. This is how models vram has no config
//! parser for (CNNs, U-Nets, diffusion models, custom modules) get a per-GPU total.

use serde_json::{Map, Value};

use crate::error::{Error, Result};
use crate::job::Overheads;
use crate::memory::{Component, Kind};

/// What `Measurement.to_dict()` (python/vram/_measure.py) writes.
#[derive(Debug, Clone, PartialEq)]
pub struct Measurement {
    /// Peak of live tensor bytes (each storage rounded to 512 bytes, as the caching allocator).
    pub peak_bytes: u64,
    /// Phase holding the peak (`forward0`, `backward1`, `optimizer1` …).
    pub peak_phase: String,
    /// Peak per phase, in the order measured.
    pub phase_peaks: Vec<(String, u64)>,
    /// Bytes by category at the peak.
    pub categories: Vec<(String, u64)>,
    /// Parameters of the module.
    pub parameters: u64,
    /// Of them, trainable.
    pub trainable_parameters: u64,
    /// How it was measured.
    pub method: String,
    /// The measurement's own caveats.
    pub notes: Vec<String>,
}

fn bad(file: &str, key: &str, why: &str) -> Error {
    Error::BadKey { file: file.into(), key: key.into(), value: String::new(), hint: why.into() }
}

fn byte_map(obj: &Map<String, Value>, key: &str, file: &str) -> Result<Vec<(String, u64)>> {
    match obj.get(key) {
        None => Ok(Vec::new()),
        Some(Value::Object(m)) => m
            .iter()
            .take(1000)
            .map(|(k, v)| v.as_u64().map(|n| (k.clone(), n)).ok_or_else(|| bad(file, key, "expected a byte count per entry")))
            .collect(),
        Some(_) => Err(bad(file, key, "expected an object of byte counts")),
    }
}

/// Where a phase name of `vram.measure` (`setup`, `forward0`, `backward0`, `optimizer0`,
/// `forward1` …) falls in the run: by step, then forward, backward, optimizer.
fn phase_order(p: &str) -> (u64, u8, String) {
    let digits = p.trim_start_matches(|c: char| !c.is_ascii_digit());
    let step = digits.parse::<u64>().unwrap_or(0);
    let kind = match p.trim_end_matches(|c: char| c.is_ascii_digit()) {
        "setup" | "init" => 0,
        "forward" => 1,
        "backward" => 2,
        "optimizer" => 3,
        _ => 4,
    };
    (step, kind, p.to_string())
}

/// Read a measurement file's bytes. Anything but the shape `vram.measure` writes is an error
/// saying what is wrong; the category bytes must add up to the peak.
pub fn parse(bytes: &[u8], file: &str) -> Result<Measurement> {
    let root: Value = serde_json::from_slice(bytes).map_err(|e| Error::Json { file: file.into(), message: e.to_string() })?;
    let Value::Object(obj) = root else {
        return Err(Error::Json { file: file.into(), message: "the top level must be a JSON object".into() });
    };
    let peak_bytes = obj.get("peak_bytes").and_then(Value::as_u64).ok_or_else(|| Error::MissingKey {
        file: file.into(),
        key: "peak_bytes".into(),
        why: "know the measured peak: write the file with vram.measure(...).save(path)".into(),
    })?;
    if peak_bytes > 1 << 50 {
        return Err(bad(file, "peak_bytes", "beyond any GPU (over 1 PiB)"));
    }
    let categories = byte_map(&obj, "categories_at_peak", file)?;
    let sum =
        categories.iter().try_fold(0u64, |a, (_, n)| a.checked_add(*n)).ok_or_else(|| bad(file, "categories_at_peak", "overflows"))?;
    if !categories.is_empty() && sum != peak_bytes {
        return Err(bad(
            file,
            "categories_at_peak",
            &format!("the categories add up to {sum} bytes, not the peak_bytes {peak_bytes}: the file was edited or truncated"),
        ));
    }
    let s = |k: &str| obj.get(k).and_then(Value::as_str).unwrap_or_default().to_string();
    let u = |k: &str| obj.get(k).and_then(Value::as_u64).unwrap_or(0);
    // JSON objects are read unordered: put the phases back in the order they ran.
    let mut phase_peaks = byte_map(&obj, "phase_peaks", file)?;
    phase_peaks.sort_by_key(|(p, _)| phase_order(p));
    Ok(Measurement {
        peak_bytes,
        peak_phase: s("peak_phase"),
        phase_peaks,
        categories,
        parameters: u("parameters"),
        trainable_parameters: u("trainable_parameters"),
        method: s("method"),
        notes: obj
            .get("notes")
            .and_then(Value::as_array)
            .map_or_else(Vec::new, |a| a.iter().take(100).filter_map(Value::as_str).map(str::to_string).collect()),
    })
}

impl Measurement {
    /// The measured categories as allocated components, then the device-level terms: the flat
    /// caching-allocator reserve (a measurement has no allocation sequence to simulate), the
    /// CUDA context and the cuBLAS workspace, as `estimate` states them.
    pub fn components(&self, o: &Overheads) -> (Vec<Component>, u64) {
        let mut v: Vec<Component> = self
            .categories
            .iter()
            .map(|(name, bytes)| Component {
                name: name.clone(),
                bytes: *bytes,
                kind: Kind::Allocated,
                detail: format!("measured ({})", self.method),
            })
            .collect();
        if v.is_empty() {
            v.push(Component { name: "measured peak".into(), bytes: self.peak_bytes, kind: Kind::Allocated, detail: self.method.clone() });
        }
        let reserve = (self.peak_bytes as f64 * o.allocator_reserve).ceil() as u64;
        v.push(Component {
            name: "caching allocator reserve".into(),
            bytes: reserve,
            kind: Kind::Overhead,
            detail: format!(
                "assumed {:.0}% of peak allocated (a measurement has no allocation sequence to simulate; --allocator-reserve)",
                o.allocator_reserve * 100.0
            ),
        });
        // a measured backward is a training step (its kernels and autograd's cuBLAS handle)
        let mode = if self.phase_peaks.iter().any(|(n, _)| n.contains("backward")) { crate::Mode::Train } else { crate::Mode::Infer };
        v.extend(crate::memory::device_overheads(o, mode));
        let total = v.iter().fold(0u64, |a, c| a.saturating_add(c.bytes));
        (v, total)
    }
}
