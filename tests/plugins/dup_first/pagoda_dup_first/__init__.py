"""pagoda-dup-first: registers the quantization method 'first-int8' under the entry-point name 'dup'."""
