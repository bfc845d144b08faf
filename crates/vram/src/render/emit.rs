//! Write a plan in an engine's own format: a DeepSpeed config JSON, an accelerate config YAML,
//! or the launch command. Pure functions of the plan.

pub mod docker;
pub mod k8s;
pub mod launch;
pub mod llama_server;
pub mod sglang;
pub mod vllm;

use serde_json::{json, Value};
use vram_core::parallel::{Engine, FsdpStrategy};
use vram_core::plan::Plan;
use vram_core::{Checkpointing, Job, Precision};

fn half_key(job: &Job) -> &'static str {
    if matches!(job.precision, Precision::Fp16 | Precision::Fp16Mixed) {
        "fp16"
    } else {
        "bf16"
    }
}

/// A DeepSpeed config (keys as in deepspeed/runtime/constants.py and zero/config.py).
pub fn deepspeed(plan: &Plan, job: &Job) -> Value {
    let par = &plan.parallel;
    let mut zero = json!({
        "stage": par.zero,
        "overlap_comm": true,
        "contiguous_gradients": true,
        "reduce_bucket_size": 500_000_000u64,
    });
    if par.zero == 3 {
        zero["stage3_prefetch_bucket_size"] = json!(50_000_000u64);
        zero["stage3_param_persistence_threshold"] = json!(100_000u64);
        zero["stage3_max_live_parameters"] = json!(1_000_000_000u64);
        zero["stage3_max_reuse_distance"] = json!(1_000_000_000u64);
        zero["stage3_gather_16bit_weights_on_model_save"] = json!(true);
    } else {
        zero["allgather_bucket_size"] = json!(500_000_000u64);
    }
    if par.offload_optimizer {
        zero["offload_optimizer"] = json!({"device": "cpu", "pin_memory": true});
    }
    if par.offload_params {
        zero["offload_param"] = json!({"device": "cpu", "pin_memory": true});
    }
    let mut v = json!({
        "train_batch_size": plan.global_batch,
        "train_micro_batch_size_per_gpu": plan.micro_batch,
        "gradient_accumulation_steps": plan.grad_accum,
        "gradient_clipping": 1.0,
        "zero_optimization": zero,
        "steps_per_print": 100,
        "wall_clock_breakdown": false,
    });
    if job.precision != Precision::Fp32 {
        v[half_key(job)] = json!({"enabled": true});
    }
    v
}

/// An accelerate config YAML (`accelerate launch --config_file`).
pub fn accelerate(plan: &Plan, job: &Job) -> String {
    let par = &plan.parallel;
    let mut y = String::from("compute_environment: LOCAL_MACHINE\ndebug: false\n");
    match par.engine {
        Engine::DeepSpeed => {
            y += "distributed_type: DEEPSPEED\ndeepspeed_config:\n";
            y += &format!("  gradient_accumulation_steps: {}\n  gradient_clipping: 1.0\n", plan.grad_accum);
            y += &format!("  offload_optimizer_device: {}\n", if par.offload_optimizer { "cpu" } else { "none" });
            y += &format!("  offload_param_device: {}\n", if par.offload_params { "cpu" } else { "none" });
            y += &format!("  zero3_init_flag: {}\n  zero_stage: {}\n", par.zero == 3, par.zero);
        }
        Engine::Fsdp => {
            let strategy = match par.fsdp {
                FsdpStrategy::FullShard => "FULL_SHARD",
                FsdpStrategy::ShardGradOp => "SHARD_GRAD_OP",
                FsdpStrategy::HybridShard => "HYBRID_SHARD",
                FsdpStrategy::NoShard => "NO_SHARD",
            };
            y += "distributed_type: FSDP\nfsdp_config:\n";
            y += &format!("  fsdp_activation_checkpointing: {}\n", plan.checkpointing != Checkpointing::None);
            y += "  fsdp_auto_wrap_policy: TRANSFORMER_BASED_WRAP\n  fsdp_backward_prefetch: BACKWARD_PRE\n  fsdp_cpu_ram_efficient_loading: true\n  fsdp_forward_prefetch: false\n";
            y += &format!("  fsdp_offload_params: {}\n  fsdp_sharding_strategy: {strategy}\n", par.offload_params);
            y += "  fsdp_state_dict_type: SHARDED_STATE_DICT\n  fsdp_sync_module_states: true\n  fsdp_use_orig_params: true\n";
        }
        Engine::Megatron => {
            y += "distributed_type: MEGATRON_LM\nmegatron_lm_config:\n";
            y += &format!(
                "  megatron_lm_gradient_clipping: 1.0\n  megatron_lm_num_micro_batches: {}\n  megatron_lm_pp_degree: {}\n",
                plan.grad_accum, par.pp
            );
            y += &format!(
                "  megatron_lm_recompute_activations: {}\n  megatron_lm_sequence_parallelism: {}\n  megatron_lm_tp_degree: {}\n",
                plan.checkpointing != Checkpointing::None,
                par.sp,
                par.tp
            );
            y += &format!("  megatron_lm_use_distributed_optimizer: {}\n", par.distributed_optimizer);
        }
        Engine::Ddp => y += if par.gpus > 1 { "distributed_type: MULTI_GPU\n" } else { "distributed_type: 'NO'\n" },
    }
    y += &format!(
        "machine_rank: 0\nmain_training_function: main\nmixed_precision: {}\n",
        if job.precision == Precision::Fp32 { "'no'" } else { half_key(job) }
    );
    y += &format!("num_machines: {}\nnum_processes: {}\n", par.nodes(), par.gpus);
    y += "rdzv_backend: static\nsame_network: true\nuse_cpu: false\n";
    y
}

/// TRL's spelling of a LoRA/QLoRA job (`--use_peft --lora_r 16 …`), empty for full fine-tuning;
/// under FSDP a 4-bit base is stored as bf16 so FSDP can shard it.
fn peft_flags(job: &Job, fsdp: bool) -> String {
    let Some(l) = &job.lora else { return String::new() };
    let mut c = format!(" --use_peft --lora_r {} --lora_alpha {}", l.r, l.alpha);
    if l.dropout > 0.0 {
        c += &format!(" --lora_dropout {}", l.dropout);
    }
    if l.method == vram_core::peft::Method::Dora {
        c += " --use_dora";
    }
    match &l.targets {
        vram_core::peft::Targets::Default => {}
        vram_core::peft::Targets::AllLinear => c += " --lora_target_modules all-linear",
        vram_core::peft::Targets::Names(n) => c += &format!(" --lora_target_modules {}", n.join(" ")),
    }
    if !l.modules_to_save.is_empty() {
        c += &format!(" --lora_modules_to_save {}", l.modules_to_save.join(" "));
    }
    if let Some(vram_core::peft::BaseWeights::Bnb4 { quant_type, nested, storage, .. }) = job.base {
        c +=
            &format!(" --load_in_4bit --bnb_4bit_quant_type {}", if quant_type == vram_core::peft::QuantType::Nf4 { "nf4" } else { "fp4" });
        if nested {
            c += " --use_bnb_nested_quant";
        }
        // FSDP flattens and shards parameters of one float dtype: FSDP-QLoRA stores the packed
        // 4-bit weights as bf16 (answer.ai fsdp_qlora; transformers bnb_4bit_quant_storage).
        if storage == vram_core::DType::BF16 || fsdp {
            c += " --bnb_4bit_quant_storage bfloat16";
        }
    }
    if matches!(job.base, Some(vram_core::peft::BaseWeights::Bnb8 { .. })) {
        c += " --load_in_8bit";
    }
    c
}

/// The launch command (`torchrun`), for an HF Trainer script or Megatron's pretrain_gpt.py.
pub fn torchrun(plan: &Plan, job: &Job) -> String {
    let par = &plan.parallel;
    let mut c = format!("torchrun --nnodes {} --nproc-per-node {}", par.nodes(), par.gpus.min(par.gpus_per_node));
    if par.nodes() > 1 {
        c += " --node-rank $NODE_RANK --master-addr $MASTER_ADDR --master-port 29500";
    }
    let half = if job.precision == Precision::Fp32 { String::new() } else { format!(" --{}", half_key(job)) };
    match par.engine {
        Engine::Megatron => {
            c += &format!(
                " pretrain_gpt.py --tensor-model-parallel-size {} --pipeline-model-parallel-size {} --context-parallel-size {} --micro-batch-size {} --global-batch-size {} --seq-length {}{half}",
                par.tp, par.pp, par.cp, plan.micro_batch, plan.global_batch, job.seq
            );
            if par.sp {
                c += " --sequence-parallel";
            }
            if par.distributed_optimizer {
                c += " --use-distributed-optimizer";
            }
            if par.virtual_stages > 1 {
                c += &format!(" --num-layers-per-virtual-pipeline-stage {}", "$LAYERS_PER_VIRTUAL_STAGE");
            }
            match plan.checkpointing {
                Checkpointing::Selective => c += " --recompute-granularity selective",
                Checkpointing::Full => c += " --recompute-granularity full --recompute-method uniform --recompute-num-layers 1",
                Checkpointing::None => {}
            }
        }
        _ => {
            c += &format!(
                " train.py --per_device_train_batch_size {} --gradient_accumulation_steps {}{half}",
                plan.micro_batch, plan.grad_accum
            );
            if plan.checkpointing != Checkpointing::None {
                c += " --gradient_checkpointing";
            }
            c += &peft_flags(job, par.engine == Engine::Fsdp);
            match par.engine {
                Engine::DeepSpeed => c += " --deepspeed ds_config.json",
                Engine::Fsdp => {
                    let s = match par.fsdp {
                        FsdpStrategy::FullShard => "full_shard",
                        FsdpStrategy::ShardGradOp => "shard_grad_op",
                        FsdpStrategy::HybridShard => "hybrid_shard",
                        FsdpStrategy::NoShard => "no_shard",
                    };
                    c += &format!(" --fsdp \"{s} auto_wrap{}\"", if par.offload_params { " offload" } else { "" });
                }
                _ => {}
            }
        }
    }
    c
}
