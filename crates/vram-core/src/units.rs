//! Exact byte units. Everything inside vram is a whole number of bytes; these helpers
//! convert for display and parse the sizes users type (`24GiB`, `80GB`, `96G`).

use crate::error::{Error, Result};

/// One kibibyte, 2^10 bytes.
pub const KIB: u64 = 1 << 10;
/// One mebibyte, 2^20 bytes.
pub const MIB: u64 = 1 << 20;
/// One gibibyte, 2^30 bytes. `nvidia-smi` and PyTorch report memory in MiB/GiB.
pub const GIB: u64 = 1 << 30;
/// One gigabyte, 10^9 bytes. GPU vendors market memory in GB (an "80 GB" H100 has 79.6 GiB usable).
pub const GB: u64 = 1_000_000_000;

/// Bytes as GiB (2^30), for display only.
pub fn gib(bytes: u64) -> f64 {
    bytes as f64 / GIB as f64
}

/// Bytes as GB (10^9), for display only.
pub fn gb(bytes: u64) -> f64 {
    bytes as f64 / GB as f64
}

/// Parse a memory size such as `24GiB`, `80GB`, `96G`, `40960MiB` or `512B`.
///
/// A bare number is refused: `80` could be bytes, GB or GiB, and reading it as bytes turned
/// `--gpu 80` into an 80-byte GPU. Flags that take bytes by their own definition (vLLM's
/// `--kv-cache-memory-bytes`) use [`parse_bytes`]. Binary suffixes (`KiB`, `MiB`, `GiB`, `TiB`) are powers of two; decimal ones (`KB`, `MB`,
/// `GB`, `TB`) are powers of ten. A bare `G`/`M` is read as binary, as `nvidia-smi` and
/// PyTorch mean it. Fractions are allowed (`79.6GiB`) and rounded down to whole bytes.
pub fn parse_size(text: &str) -> Result<u64> {
    let s = text.trim();
    let split = s.find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '_')).unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let num: String = num.chars().filter(|c| *c != '_').collect();
    let bad = || Error::InvalidValue {
        what: "memory size".into(),
        value: text.into(),
        hint: "write a number with a unit, e.g. 24GiB, 80GB, 96G or 40960MiB".into(),
    };
    let value: f64 = num.parse().map_err(|_| bad())?;
    let mult: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" => {
            return Err(Error::InvalidValue {
                what: "memory size".into(),
                value: text.into(),
                hint: format!("a bare number is ambiguous: write {0}GB (10^9 bytes), {0}GiB (2^30 bytes) or {0}B", num),
            })
        }
        "b" => 1,
        "k" | "kib" => KIB,
        "m" | "mib" => MIB,
        "g" | "gib" => GIB,
        "t" | "tib" => 1 << 40,
        "kb" => 1_000,
        "mb" => 1_000_000,
        "gb" => GB,
        "tb" => 1_000_000_000_000,
        _ => return Err(bad()),
    };
    let bytes = value * mult as f64;
    if !bytes.is_finite() || !(1.0..=1e18).contains(&bytes) {
        return Err(Error::InvalidValue {
            what: "memory size".into(),
            value: text.into(),
            hint: "a GPU memory size must be between 1 byte and 1 EB".into(),
        });
    }
    Ok(bytes as u64)
}

/// Parse a byte count for a flag whose unit is bytes by definition (vLLM's
/// `--kv-cache-memory-bytes`): a bare integer is bytes; a size with a unit is also accepted.
pub fn parse_bytes(text: &str) -> Result<u64> {
    let s = text.trim();
    if !s.is_empty() && s.chars().all(|c| c.is_ascii_digit() || c == '_') {
        return parse_size(&format!("{s}B"));
    }
    parse_size(text)
}

/// vLLM's human-readable integer (vllm/utils/argparse_utils.py `human_readable_int`, taken by
/// `--max-model-len`, `--max-num-batched-tokens` and `--kv-cache-memory-bytes`): a plain integer,
/// or a number with one suffix, lowercase decimal (`32k` = 32,000, `25.6k` = 25,600, `20g` =
/// 2·10^10) and uppercase binary (`32K` = 32,768, `20G` = 20·2^30; no fractions). `None` when
/// the text is neither, or overflows.
pub fn parse_vllm_int(text: &str) -> Option<u64> {
    let s = text.trim();
    let last = s.chars().last()?;
    let (num, mult, decimal) = match last {
        'k' => (&s[..s.len() - 1], 1_000u64, true),
        'm' => (&s[..s.len() - 1], 1_000_000, true),
        'g' => (&s[..s.len() - 1], 1_000_000_000, true),
        't' => (&s[..s.len() - 1], 1_000_000_000_000, true),
        'K' => (&s[..s.len() - 1], 1 << 10, false),
        'M' => (&s[..s.len() - 1], 1 << 20, false),
        'G' => (&s[..s.len() - 1], 1 << 30, false),
        'T' => (&s[..s.len() - 1], 1 << 40, false),
        _ => return s.parse().ok(),
    };
    // `\d+(\.\d+)?` exactly: no sign, no exponent, digits on both sides of one point.
    let (int, frac) = num.split_once('.').unwrap_or((num, ""));
    let digits = |t: &str| !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit());
    if !digits(int) || (num.contains('.') && (!decimal || !digits(frac))) {
        return None;
    }
    if frac.is_empty() {
        return int.parse::<u64>().ok()?.checked_mul(mult);
    }
    // vLLM: int(float(number) * mult), i.e. rounded down.
    let v = num.parse::<f64>().ok()? * mult as f64;
    (v.is_finite() && v < u64::MAX as f64).then_some(v as u64)
}

/// An integer with thousands separators (`8,030,261,248`), as every front end prints counts.
pub fn thousands(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::with_capacity(s.len() + s.len() / 3);
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_binary_and_decimal_units() {
        assert_eq!(parse_size("24GiB").unwrap(), 24 * GIB);
        assert_eq!(parse_size("80GB").unwrap(), 80 * GB);
        assert_eq!(parse_size("96g").unwrap(), 96 * GIB);
        assert_eq!(parse_size("40960MiB").unwrap(), 40 * GIB);
        assert_eq!(parse_size("1_000B").unwrap(), 1000);
        assert_eq!(parse_bytes("1_000").unwrap(), 1000);
        assert_eq!(parse_bytes("2GiB").unwrap(), 2 * GIB);
        assert_eq!(parse_size(" 1.5GiB ").unwrap(), 3 * GIB / 2);
    }

    #[test]
    fn reads_vllms_human_readable_integers() {
        assert_eq!(parse_vllm_int("32768"), Some(32_768));
        assert_eq!(parse_vllm_int("32k"), Some(32_000));
        assert_eq!(parse_vllm_int("32K"), Some(32_768));
        assert_eq!(parse_vllm_int("25.6k"), Some(25_600));
        assert_eq!(parse_vllm_int("20g"), Some(20_000_000_000));
        assert_eq!(parse_vllm_int("20G"), Some(20 << 30));
        assert_eq!(parse_vllm_int("1M"), Some(1 << 20));
        for bad in ["", "k", "1.5K", "-3k", "1e3", "3kb", "1.k", "99999999999999999999T", "auto"] {
            assert_eq!(parse_vllm_int(bad), None, "{bad}");
        }
    }

    #[test]
    fn rejects_garbage() {
        for bad in ["", "GiB", "12XB", "-5GB", "0", "80", "1e30GB", "nan"] {
            assert!(parse_size(bad).is_err(), "{bad} should fail");
        }
    }
}
