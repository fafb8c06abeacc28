"""Neural-network functions."""
