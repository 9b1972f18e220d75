"""Hardware descriptions: one YAML file per device, every quantity with its unit and source."""
