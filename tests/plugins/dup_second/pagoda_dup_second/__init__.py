"""pagoda-dup-second: registers the quantization method 'second-int8' under the entry-point name 'dup'."""
