"""Triton kernels for GLM-5 inference, each beside a torch reference with the same signature."""
