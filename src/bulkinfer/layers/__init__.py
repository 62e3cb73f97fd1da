"""Model building blocks; each calls its kernels through a KernelOps chosen once per engine."""
