"""m3-image: reproducible, validated MI300X vLLM serving images for MiniMax-M3 MXFP8."""

__version__ = "0.1.0"
