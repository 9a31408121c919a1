"""The package list and the design card's layout for setuptools (the rest is pyproject.toml).

The YAML specs live in top-level ``workflows/`` and the report notebooks in top-level
``templates/``: one copy in git. A wheel carries them inside the package as
``bayesflow/workflows`` and ``bayesflow/templates`` by mapping those two package names onto
the top-level folders, which ``pyproject.toml`` alone cannot say beside an automatic package
list.
"""

from setuptools import find_packages, setup

SHIPPED = {"bayesflow.workflows": "workflows", "bayesflow.templates": "templates"}

setup(
    packages=find_packages(include=["bayesflow", "bayesflow.*"]) + list(SHIPPED),
    package_dir=SHIPPED,
)
