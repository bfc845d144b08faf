//! GPU catalogue. Memory is what the framework can see on one device: where the number is
//! `nvidia-smi`'s reported total (MiB) it says so; otherwise it is the vendor's nominal size.
//! Dense 16-bit tensor throughput is the vendor datasheet figure without sparsity.

use serde::Serialize;

use crate::error::{nearest, Error, Result};
use crate::units::{parse_size, GB, GIB, MIB};

/// Where a catalogue memory size comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum MemorySource {
    /// Total memory as `nvidia-smi` reports it for this model.
    NvidiaSmi,
    /// Vendor's nominal capacity.
    Nominal,
    /// Typed by the user (`--gpu 24GiB`).
    User,
}

/// One GPU model.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Gpu {
    /// Canonical name (`h100-80gb`).
    pub name: String,
    /// Marketing name.
    pub display: String,
    /// Device memory in bytes.
    pub memory: u64,
    /// Where `memory` comes from.
    pub memory_source: MemorySource,
    /// Dense bf16/fp16 tensor TFLOP/s (datasheet, no sparsity); 0 when unknown.
    pub tflops_16bit: f64,
}

struct Entry {
    name: &'static str,
    aliases: &'static [&'static str],
    display: &'static str,
    mib: u64,
    src: MemorySource,
    tflops: f64,
}

use MemorySource::{Nominal, NvidiaSmi};

const CATALOGUE: &[Entry] = &[
    Entry { name: "b200", aliases: &["b200-180gb"], display: "NVIDIA B200", mib: 183_359, src: NvidiaSmi, tflops: 2250.0 },
    Entry {
        name: "gb200",
        aliases: &["gb200-186gb"],
        display: "NVIDIA GB200 (per GPU)",
        mib: 186 * GB / MIB,
        src: Nominal,
        tflops: 2500.0,
    },
    Entry { name: "h200", aliases: &["h200-141gb", "h200-sxm"], display: "NVIDIA H200 141GB", mib: 143_771, src: NvidiaSmi, tflops: 989.0 },
    Entry {
        name: "h100-80gb",
        aliases: &["h100", "h100-sxm", "h100-sxm5", "h100-80gb-hbm3"],
        display: "NVIDIA H100 SXM 80GB",
        mib: 81_559,
        src: NvidiaSmi,
        tflops: 989.0,
    },
    Entry { name: "h100-pcie", aliases: &["h100-pcie-80gb"], display: "NVIDIA H100 PCIe 80GB", mib: 81_559, src: NvidiaSmi, tflops: 756.0 },
    Entry {
        name: "h100-nvl",
        aliases: &["h100-94gb", "h100-nvl-94gb"],
        display: "NVIDIA H100 NVL 94GB",
        mib: 95_830,
        src: NvidiaSmi,
        tflops: 835.0,
    },
    Entry { name: "h800", aliases: &["h800-80gb"], display: "NVIDIA H800 80GB", mib: 81_559, src: NvidiaSmi, tflops: 989.0 },
    Entry { name: "h20", aliases: &["h20-96gb", "h20-nvlink"], display: "NVIDIA H20 96GB", mib: 97_871, src: NvidiaSmi, tflops: 148.0 },
    Entry {
        name: "a100-80gb",
        aliases: &["a100", "a100-sxm4-80gb", "a100-80g"],
        display: "NVIDIA A100 80GB",
        mib: 81_920,
        src: NvidiaSmi,
        tflops: 312.0,
    },
    Entry {
        name: "a100-40gb",
        aliases: &["a100-sxm4-40gb", "a100-pcie-40gb", "a100-40g"],
        display: "NVIDIA A100 40GB",
        mib: 40_960,
        src: NvidiaSmi,
        tflops: 312.0,
    },
    Entry { name: "a800", aliases: &["a800-80gb"], display: "NVIDIA A800 80GB", mib: 81_920, src: NvidiaSmi, tflops: 312.0 },
    Entry { name: "l40s", aliases: &["l40s-48gb"], display: "NVIDIA L40S 48GB", mib: 46_068, src: NvidiaSmi, tflops: 362.0 },
    Entry { name: "l40", aliases: &["l40-48gb"], display: "NVIDIA L40 48GB", mib: 46_068, src: NvidiaSmi, tflops: 181.0 },
    Entry { name: "l4", aliases: &["l4-24gb"], display: "NVIDIA L4 24GB", mib: 23_034, src: NvidiaSmi, tflops: 121.0 },
    Entry { name: "a10g", aliases: &["a10g-24gb"], display: "NVIDIA A10G 24GB", mib: 23_028, src: NvidiaSmi, tflops: 70.0 },
    Entry { name: "a10", aliases: &["a10-24gb"], display: "NVIDIA A10 24GB", mib: 23_028, src: NvidiaSmi, tflops: 125.0 },
    Entry {
        name: "a6000",
        aliases: &["rtx-a6000", "a6000-48gb"],
        display: "NVIDIA RTX A6000 48GB",
        mib: 49_140,
        src: NvidiaSmi,
        tflops: 155.0,
    },
    Entry {
        name: "rtx-4090",
        aliases: &["4090", "rtx4090", "geforce-rtx-4090"],
        display: "NVIDIA GeForce RTX 4090 24GB",
        mib: 24_564,
        src: NvidiaSmi,
        tflops: 165.0,
    },
    Entry {
        name: "rtx-4080",
        aliases: &["4080", "rtx4080"],
        display: "NVIDIA GeForce RTX 4080 16GB",
        mib: 16_376,
        src: NvidiaSmi,
        tflops: 97.0,
    },
    Entry {
        name: "rtx-3090",
        aliases: &["3090", "rtx3090"],
        display: "NVIDIA GeForce RTX 3090 24GB",
        mib: 24_576,
        src: NvidiaSmi,
        tflops: 71.0,
    },
    Entry {
        name: "rtx-3080",
        aliases: &["3080", "rtx3080", "rtx-3080-10gb"],
        display: "NVIDIA GeForce RTX 3080 10GB",
        mib: 10_240,
        src: NvidiaSmi,
        tflops: 60.0,
    },
    // Consumer and workstation cards: nvidia-smi totals on Linux from public outputs, each seen
    // in three or more (validation/gpu/consumer_gpus.md, with the quoted lines). Where no
    // whitepaper figure was quoted, the dense FP16-tensor/FP32-accumulate TFLOP/s is 2× the FP32
    // peak for GeForce (4× for RTX A/Ada workstation cards), the rule that reproduces the quoted
    // 4090, 3090 and A6000 figures.
    Entry {
        name: "rtx-5090",
        aliases: &["5090", "rtx5090", "rtx-5090-32gb"],
        display: "NVIDIA GeForce RTX 5090 32GB",
        mib: 32_607,
        src: NvidiaSmi,
        tflops: 209.5,
    },
    Entry {
        name: "rtx-5080",
        aliases: &["5080", "rtx5080", "rtx-5080-16gb"],
        display: "NVIDIA GeForce RTX 5080 16GB",
        mib: 16_303,
        src: NvidiaSmi,
        tflops: 112.6,
    },
    Entry {
        name: "rtx-5070-ti",
        aliases: &["5070-ti", "rtx5070ti", "rtx-5070-ti-16gb"],
        display: "NVIDIA GeForce RTX 5070 Ti 16GB",
        mib: 16_303,
        src: NvidiaSmi,
        tflops: 87.9,
    },
    Entry {
        name: "rtx-4070-ti-super",
        aliases: &["4070-ti-super", "rtx4070tisuper", "rtx-4070-ti-super-16gb"],
        display: "NVIDIA GeForce RTX 4070 Ti SUPER 16GB",
        mib: 16_376,
        src: NvidiaSmi,
        tflops: 88.2,
    },
    Entry {
        name: "rtx-4070-ti",
        aliases: &["4070-ti", "rtx4070ti", "rtx-4070-ti-12gb"],
        display: "NVIDIA GeForce RTX 4070 Ti 12GB",
        mib: 12_282,
        src: NvidiaSmi,
        tflops: 80.2,
    },
    Entry {
        name: "rtx-4070",
        aliases: &["4070", "rtx4070", "rtx-4070-12gb"],
        display: "NVIDIA GeForce RTX 4070 12GB",
        mib: 12_282,
        src: NvidiaSmi,
        tflops: 58.3,
    },
    Entry {
        name: "rtx-4060-ti-16gb",
        aliases: &["4060-ti-16gb", "rtx4060ti-16gb"],
        display: "NVIDIA GeForce RTX 4060 Ti 16GB",
        mib: 16_380,
        src: NvidiaSmi,
        tflops: 44.1,
    },
    Entry {
        name: "rtx-4060-ti-8gb",
        aliases: &["4060-ti-8gb", "rtx4060ti-8gb"],
        display: "NVIDIA GeForce RTX 4060 Ti 8GB",
        mib: 8_188,
        src: NvidiaSmi,
        tflops: 44.1,
    },
    Entry {
        name: "rtx-4060",
        aliases: &["4060", "rtx4060", "rtx-4060-8gb"],
        display: "NVIDIA GeForce RTX 4060 8GB",
        mib: 8_188,
        src: NvidiaSmi,
        tflops: 30.2,
    },
    Entry {
        name: "rtx-3080-ti",
        aliases: &["3080-ti", "rtx3080ti", "rtx-3080-ti-12gb"],
        display: "NVIDIA GeForce RTX 3080 Ti 12GB",
        mib: 12_288,
        src: NvidiaSmi,
        tflops: 68.2,
    },
    Entry {
        name: "rtx-3070",
        aliases: &["3070", "rtx3070", "rtx-3070-8gb"],
        display: "NVIDIA GeForce RTX 3070 8GB",
        mib: 8_192,
        src: NvidiaSmi,
        tflops: 40.6,
    },
    Entry {
        name: "rtx-3060",
        aliases: &["3060", "rtx3060", "rtx-3060-12gb"],
        display: "NVIDIA GeForce RTX 3060 12GB",
        mib: 12_288,
        src: NvidiaSmi,
        tflops: 25.5,
    },
    Entry {
        name: "rtx-a5000",
        aliases: &["a5000", "rtx-a5000-24gb"],
        display: "NVIDIA RTX A5000 24GB (ECC off)",
        mib: 24_564,
        src: NvidiaSmi,
        tflops: 111.1,
    },
    Entry {
        name: "rtx-a4000",
        aliases: &["a4000", "rtx-a4000-16gb"],
        display: "NVIDIA RTX A4000 16GB (ECC off)",
        mib: 16_376,
        src: NvidiaSmi,
        tflops: 76.7,
    },
    Entry {
        name: "rtx-6000-ada",
        aliases: &["6000-ada", "rtx-6000-ada-48gb"],
        display: "NVIDIA RTX 6000 Ada 48GB (ECC off; 46068 MiB with ECC on)",
        mib: 49_140,
        src: NvidiaSmi,
        tflops: 364.0,
    },
    Entry {
        name: "rtx-pro-6000",
        aliases: &["rtx-pro-6000-blackwell", "pro-6000", "rtx-pro-6000-96gb"],
        display: "NVIDIA RTX PRO 6000 Blackwell 96GB",
        mib: 97_887,
        src: NvidiaSmi,
        tflops: 0.0,
    },
    Entry {
        name: "v100-32gb",
        aliases: &["v100-sxm2-32gb", "v100-32g"],
        display: "NVIDIA V100 32GB (fp16 only)",
        mib: 32_768,
        src: Nominal,
        tflops: 125.0,
    },
    Entry {
        name: "v100-16gb",
        aliases: &["v100", "v100-sxm2-16gb", "v100-16g"],
        display: "NVIDIA V100 16GB (fp16 only)",
        mib: 16_384,
        src: Nominal,
        tflops: 125.0,
    },
    Entry {
        name: "t4",
        aliases: &["t4-16gb", "tesla-t4"],
        display: "NVIDIA T4 16GB (fp16 only)",
        mib: 15_360,
        src: NvidiaSmi,
        tflops: 65.0,
    },
    Entry {
        name: "mi300x",
        aliases: &["mi300x-192gb"],
        display: "AMD Instinct MI300X 192GB",
        mib: 192 * 1024,
        src: Nominal,
        tflops: 1307.0,
    },
    Entry {
        name: "mi250x",
        aliases: &["mi250x-gcd"],
        display: "AMD Instinct MI250X (one 64GB GCD, as frameworks see it)",
        mib: 64 * 1024,
        src: Nominal,
        tflops: 191.5,
    },
];

/// What CUDA reports as one GPU's total memory (`cudaMemGetInfo`: PyTorch's "total capacity" and
/// the total vLLM sizes its budget from), MiB: the lower median of the Linux hits in
/// validation/gpu/cuda_totals.jsonl (PyTorch out-of-memory messages and vLLM start-up lines in
/// public threads, printed in GiB to two decimals, so each is good to about ±5 MiB). The driver's
/// reserve below nvidia-smi's total differs by GPU (256 MiB on a T4, 768 on an A100 80GB) and
/// moves by up to ~190 MiB between driver releases; Windows (WDDM) and WSL report nearly the
/// whole card, and a MIG slice its own size.
const CUDA_TOTALS_MIB: &[(&str, u64)] = &[
    ("h100-80gb", 81_091),
    ("h100-pcie", 81_091),
    ("h100-nvl", 95_324),
    ("h200", 143_165),
    ("h800", 81_009),
    ("h20", 97_280),
    ("b200", 182_630),
    ("a100-80gb", 81_152),
    ("a100-40gb", 40_438),
    ("l40s", 45_455),
    ("l40", 45_466),
    ("l4", 22_487),
    ("a10g", 22_508),
    ("a10", 22_712),
    ("a6000", 48_681),
    ("rtx-4090", 24_207),
    ("rtx-3090", 24_125),
    ("t4", 15_094),
    ("v100-32gb", 32_492),
    ("rtx-5090", 32_092),
    ("rtx-a4000", 15_985),
    ("rtx-pro-6000", 97_290),
];

/// What vLLM's kernels choose by: a GPU's CUDA compute capability (`None` on ROCm) and its
/// streaming multiprocessors (compute units on AMD), from the vendors' datasheets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Arch {
    /// CUDA compute capability (major, minor); `None` for an AMD GPU.
    pub cuda_cc: Option<(u32, u32)>,
    /// Streaming multiprocessors (CUDA) or compute units per device (ROCm).
    pub multiprocessors: u32,
}

/// A CUDA compute capability (major, minor), `None` on ROCm.
type CudaCc = Option<(u32, u32)>;

/// [`Arch`] of each catalogued GPU (NVIDIA and AMD datasheets; an MI250X is two devices of 110
/// compute units each).
const ARCH: &[(&str, CudaCc, u32)] = &[
    ("b200", Some((10, 0)), 148),
    ("gb200", Some((10, 0)), 148),
    ("h200", Some((9, 0)), 132),
    ("h100-80gb", Some((9, 0)), 132),
    ("h100-pcie", Some((9, 0)), 114),
    ("h100-nvl", Some((9, 0)), 132),
    ("h800", Some((9, 0)), 132),
    ("h20", Some((9, 0)), 78),
    ("a100-80gb", Some((8, 0)), 108),
    ("a100-40gb", Some((8, 0)), 108),
    ("a800", Some((8, 0)), 108),
    ("l40s", Some((8, 9)), 142),
    ("l40", Some((8, 9)), 142),
    ("l4", Some((8, 9)), 58),
    ("a10g", Some((8, 6)), 80),
    ("a10", Some((8, 6)), 72),
    ("a6000", Some((8, 6)), 84),
    ("rtx-4090", Some((8, 9)), 128),
    ("rtx-4080", Some((8, 9)), 76),
    ("rtx-3090", Some((8, 6)), 82),
    ("rtx-3080", Some((8, 6)), 68),
    ("rtx-5090", Some((12, 0)), 170),
    ("rtx-5080", Some((12, 0)), 84),
    ("rtx-5070-ti", Some((12, 0)), 70),
    ("rtx-4070-ti-super", Some((8, 9)), 66),
    ("rtx-4070-ti", Some((8, 9)), 60),
    ("rtx-4070", Some((8, 9)), 46),
    ("rtx-4060-ti-16gb", Some((8, 9)), 34),
    ("rtx-4060-ti-8gb", Some((8, 9)), 34),
    ("rtx-4060", Some((8, 9)), 24),
    ("rtx-3080-ti", Some((8, 6)), 80),
    ("rtx-3070", Some((8, 6)), 46),
    ("rtx-3060", Some((8, 6)), 28),
    ("rtx-a5000", Some((8, 6)), 64),
    ("rtx-a4000", Some((8, 6)), 48),
    ("rtx-6000-ada", Some((8, 9)), 142),
    ("rtx-pro-6000", Some((12, 0)), 188),
    ("v100-32gb", Some((7, 0)), 80),
    ("v100-16gb", Some((7, 0)), 80),
    ("t4", Some((7, 5)), 40),
    ("mi300x", None, 304),
    ("mi250x", None, 110),
];

/// How the GPUs of one tensor-parallel group reach each other, which decides whether vLLM's
/// custom all-reduce runs or NCCL's all-reduce is captured into the CUDA graphs
/// (vllm/distributed/device_communicators/custom_all_reduce.py: off above two GPUs that are not
/// fully NVLink-connected, and off without GPU peer-to-peer access).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Interconnect {
    /// SXM parts on NVLink/NVSwitch: every GPU of the group reaches every other.
    NvLink,
    /// NVLink bridges between pairs (H100 NVL): full connectivity at two GPUs only.
    NvLinkPairs,
    /// PCIe with peer-to-peer access (data-centre and workstation cards).
    Pcie,
    /// GeForce cards: the driver allows no peer-to-peer access, so custom all-reduce is off.
    PcieNoP2p,
}

impl Interconnect {
    /// Whether vLLM's all-reduce at `tp` GPUs is NCCL's (captured into the CUDA graphs).
    pub fn nccl_all_reduce(self, tp: u64) -> bool {
        tp > 1
            && match self {
                Interconnect::NvLink => false,
                Interconnect::NvLinkPairs | Interconnect::Pcie => tp > 2,
                Interconnect::PcieNoP2p => true,
            }
    }
}

/// The [`Interconnect`] of a catalogued NVIDIA GPU as usually deployed (SXM parts on NVLink);
/// `None` for AMD GPUs and sizes typed by the user.
pub fn interconnect(gpu: &Gpu) -> Option<Interconnect> {
    if gpu.memory_source == MemorySource::User {
        return None;
    }
    let n = gpu.name.as_str();
    Some(match n {
        "b200" | "gb200" | "h200" | "h100-80gb" | "h800" | "h20" | "a100-80gb" | "a100-40gb" | "a800" | "v100-32gb" | "v100-16gb" => {
            Interconnect::NvLink
        }
        "h100-nvl" => Interconnect::NvLinkPairs,
        "mi300x" | "mi250x" => return None,
        _ if n.starts_with("rtx-") && !n.starts_with("rtx-a") && !n.starts_with("rtx-pro") && n != "rtx-6000-ada" => {
            Interconnect::PcieNoP2p
        }
        _ => Interconnect::Pcie,
    })
}

/// The architecture of a catalogued GPU; `None` for a size typed by the user.
pub fn arch(gpu: &Gpu) -> Option<Arch> {
    if gpu.memory_source == MemorySource::User {
        return None;
    }
    ARCH.iter().find(|(n, _, _)| *n == gpu.name).map(|&(_, cuda_cc, multiprocessors)| Arch { cuda_cc, multiprocessors })
}

/// The reserve assumed for a GPU without logged totals: the median of the 70 Linux hits'
/// nvidia-smi total minus CUDA total (validation/gpu/cuda_totals.jsonl).
pub const DEFAULT_DRIVER_RESERVE_MIB: u64 = 509;

/// Where [`cuda_total`]'s figure comes from, for reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CudaTotalSource {
    /// The median of public logs for this GPU.
    Logged,
    /// nvidia-smi's total less the median reserve (no log for this GPU).
    Reserve,
    /// The size as given (a typed size, or a nominal one).
    AsGiven,
}

/// What CUDA reports as total memory for `gpu` (see [`CUDA_TOTALS_MIB`]), and where it comes
/// from. Sizes the user typed are taken as CUDA totals.
pub fn cuda_total(gpu: &Gpu) -> (u64, CudaTotalSource) {
    if gpu.memory_source == MemorySource::User {
        return (gpu.memory, CudaTotalSource::AsGiven);
    }
    if let Some((_, mib)) = CUDA_TOTALS_MIB.iter().find(|(n, _)| *n == gpu.name) {
        return (mib * MIB, CudaTotalSource::Logged);
    }
    match gpu.memory_source {
        MemorySource::NvidiaSmi => (gpu.memory.saturating_sub(DEFAULT_DRIVER_RESERVE_MIB * MIB), CudaTotalSource::Reserve),
        _ => (gpu.memory, CudaTotalSource::AsGiven),
    }
}

/// The catalogue's logged CUDA totals, MiB (for the test that re-derives them from the data).
pub fn logged_cuda_totals_mib() -> &'static [(&'static str, u64)] {
    CUDA_TOTALS_MIB
}

impl CudaTotalSource {
    /// One phrase for a report.
    pub fn describe(self) -> String {
        match self {
            CudaTotalSource::Logged => "CUDA total as public logs print it for this GPU (drivers move it by up to 0.2 GiB)".into(),
            CudaTotalSource::Reserve => {
                format!("CUDA total = nvidia-smi total − {DEFAULT_DRIVER_RESERVE_MIB} MiB, the median driver reserve (no log for this GPU)")
            }
            CudaTotalSource::AsGiven => "CUDA total as given".into(),
        }
    }
}

fn norm_name(s: &str) -> String {
    let mut n = s.trim().to_ascii_lowercase().replace([' ', '_'], "-");
    for prefix in ["nvidia-", "amd-", "geforce-", "tesla-"] {
        if let Some(rest) = n.strip_prefix(prefix) {
            n = rest.to_string();
        }
    }
    n
}

fn to_gpu(e: &Entry) -> Gpu {
    Gpu { name: e.name.into(), display: e.display.into(), memory: e.mib * MIB, memory_source: e.src, tflops_16bit: e.tflops }
}

/// Every GPU in the catalogue.
pub fn catalogue() -> Vec<Gpu> {
    CATALOGUE.iter().map(to_gpu).collect()
}

/// Find a GPU by name or alias (case-insensitive, `NVIDIA ` prefix ignored), or read a raw size
/// such as `24GiB` / `80GB`.
pub fn lookup(name: &str) -> Result<Gpu> {
    let n = norm_name(name);
    if let Some(e) = CATALOGUE.iter().find(|e| e.name == n || e.aliases.contains(&n.as_str())) {
        return Ok(to_gpu(e));
    }
    if n.starts_with(|c: char| c.is_ascii_digit()) {
        if let Ok(bytes) = parse_size(name) {
            let unit = if name.to_ascii_lowercase().contains("ib") || !name.to_ascii_lowercase().ends_with('b') { "GiB" } else { "GB" };
            let shown = if unit == "GiB" { bytes as f64 / GIB as f64 } else { bytes as f64 / GB as f64 };
            return Ok(Gpu {
                name: name.trim().into(),
                display: format!("custom {shown:.2} {unit}"),
                memory: bytes,
                memory_source: MemorySource::User,
                tflops_16bit: 0.0,
            });
        }
    }
    let known = CATALOGUE.iter().flat_map(|e| std::iter::once(e.name).chain(e.aliases.iter().copied()));
    Err(Error::Unknown { what: "GPU".into(), name: name.into(), suggestions: nearest(&n, known) })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aliases_and_sizes() {
        assert_eq!(lookup("H100").unwrap().name, "h100-80gb");
        assert_eq!(lookup("NVIDIA H100-SXM").unwrap().name, "h100-80gb");
        assert_eq!(lookup("h20").unwrap().memory, 97_871 * MIB);
        assert_eq!(lookup("24GiB").unwrap().memory, 24 * GIB);
        assert_eq!(lookup("80GB").unwrap().memory, 80 * GB);
        assert!(lookup("h1000").is_err());
        assert!(CATALOGUE.len() >= 20);
        // Consumer cards by their common spellings (validation/gpu/consumer_gpus.md).
        assert_eq!(lookup("RTX 3060").unwrap().memory, 12_288 * MIB);
        assert_eq!(lookup("5090").unwrap().memory, 32_607 * MIB);
        assert_eq!(lookup("rtx-4060-ti-16gb").unwrap().memory, 16_380 * MIB);
        assert_eq!(lookup("rtx-4060-8gb").unwrap().name, "rtx-4060");
        assert!(lookup("rtx-4060-ti").is_err(), "two memory sizes: the name must say which");
    }

    #[test]
    fn every_catalogued_gpu_has_its_architecture() {
        for g in catalogue() {
            assert!(arch(&g).is_some(), "{}", g.name);
        }
        assert_eq!(arch(&lookup("h100").unwrap()).unwrap().cuda_cc, Some((9, 0)));
        assert_eq!(arch(&lookup("mi300x").unwrap()).unwrap().cuda_cc, None);
        assert_eq!(arch(&lookup("24GiB").unwrap()), None);
    }
}
