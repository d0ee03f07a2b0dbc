"""Image inputs of vision-language models: processing prompts with images in the front end, and the
step feature that runs the vision encoder and hands the model its rows (docs/multimodal.md)."""
