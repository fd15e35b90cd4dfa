"""In-memory estimators: spectral learning, recovery, refinement, the HMMs and their kernels, checks, simulation."""
