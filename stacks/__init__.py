"""The environment blueprint: typed stack config and the wiring of components into one environment."""
