"""pagoda-platform-cpu: the CPU platform with compiled element-wise kernels (platform ``cpu-native``)."""
