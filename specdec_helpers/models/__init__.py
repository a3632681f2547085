"""Where models come from: presets and `load_pair`, the shipped toy pair, SmolLM2, the cache folder, trained drafts."""
