"""pagoda-attention-cpu: C++ paged decode attention for CPUs (attention backend ``cpu``)."""
