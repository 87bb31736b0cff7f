"""`localspec bench`: plain vs speculative decoding over draft lengths, optionally next to llama.cpp's
own speculative tools. prompts -> runner (one Engine) -> aggregate -> report."""
