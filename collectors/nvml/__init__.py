"""GPU memory from NVML on the machine this runs on."""
