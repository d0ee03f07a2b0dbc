"""Vision encoders of the multimodal families (CLIP and SigLIP towers, Qwen2.5-VL's windowed ViT),
built from Pagoda's linear and norm layers."""
