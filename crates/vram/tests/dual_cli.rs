//! `vram estimate` on CLIP and SigLIP dual encoders from the command line: both towers, the
//! flags that apply to them, and what is refused.

mod util;

use util::{fails, json};

const CLIP: &str = "../../validation/configs/vision/clip-vit-base-patch32.json";
const SIGLIP: &str = "../../validation/configs/vision/siglip-base-patch16-224.json";

#[test]
fn a_dual_encoder_is_estimated_with_both_towers() {
    let v = json(&["estimate", "--model", CLIP, "--batch", "64"]);
    assert_eq!(v["model"]["kind"], "dual-encoder");
    assert_eq!(v["model"]["parameters"], 151_277_313);
    assert_eq!(v["model"]["dual_encoder"]["vision_parameters"], 87_456_000);
    // The caption length defaults to the text tower's 77 positions.
    assert_eq!(v["job"]["seq"], 77);
    let names: Vec<&str> = v["components"].as_array().unwrap().iter().map(|c| c["name"].as_str().unwrap()).collect();
    assert!(names.contains(&"activations: vision tower"), "{names:?}");
    let s = json(&["estimate", "--model", SIGLIP, "--batch", "64"]);
    assert_eq!(s["job"]["seq"], 64);
    assert_eq!(s["model"]["dual_encoder"]["family"], "siglip");
}

#[test]
fn freezing_the_image_tower_and_resizing_images_change_the_peak() {
    let peak = |extra: &[&str]| {
        let mut a = vec!["estimate", "--model", CLIP, "--batch", "64"];
        a.extend_from_slice(extra);
        json(&a)["peak_allocated_bytes"].as_u64().unwrap()
    };
    let base = peak(&[]);
    assert!(peak(&["--freeze-vision-tower"]) < base);
    assert!(peak(&["--image-size", "336"]) > base);
}

#[test]
fn what_a_dual_encoder_does_not_take_is_refused() {
    let e = fails(&["estimate", "--model", CLIP, "--task", "text-classification"], 2);
    assert!(e.contains("contrastive"), "{e}");
    let e = fails(&["estimate", "--model", CLIP, "--images-per-sample", "2"], 2);
    assert!(e.contains("one image per sample"), "{e}");
    let e = fails(&["serve", "--model", CLIP, "-g", "h100"], 2);
    assert!(e.contains("dual-encoder"), "{e}");
    let e = fails(&["estimate", "--model", CLIP, "--peft", "lora"], 2);
    assert!(e.contains("LoRA"), "{e}");
}
