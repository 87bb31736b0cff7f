"""How many tokens to draft each round: fixed K, or auto from measured costs (one per engine) and
acceptance evidence per source; batch pricing, calibration at load, the memory across processes."""
