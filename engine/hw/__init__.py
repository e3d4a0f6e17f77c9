"""Hardware targets (target.py: HardwareTarget loaded from YAML) and the cost model (cost_model.py)."""
