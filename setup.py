# The package list is computed here because bulkinfer.kernels lives outside src/ (see package-dir in
# pyproject.toml), and setuptools' automatic discovery cannot combine the two roots.
from setuptools import find_packages, setup

setup(packages=find_packages("src") + ["bulkinfer.kernels"])
