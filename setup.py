"""nmtkit: neural machine translation toolkit (RNNsearch, RNNencdec, LSTM attention)."""
import re
from pathlib import Path

from setuptools import find_packages, setup

HERE = Path(__file__).parent
VERSION = re.search(r'__version__ = "([^"]+)"', (HERE / "nmtkit" / "__init__.py").read_text()).group(1)

setup(
    name="nmtkit",
    version=VERSION,
    description="Neural machine translation toolkit in the style of the classic MT toolkits",
    long_description=(HERE / "README.md").read_text(encoding="utf-8"),
    long_description_content_type="text/markdown",
    packages=find_packages(include=["nmtkit", "nmtkit.*"]),
    package_data={"nmtkit.serve": ["page.html"]},
    python_requires=">=3.11",
    install_requires=[
        "click>=8.1",
        "torch>=2.1",
        "sacremoses>=0.1",
        "regex>=2022.1",  # protected patterns matched with a time limit (also a sacremoses dependency)
        "subword-nmt>=0.3.8",
        "sacrebleu>=2.3.2",  # 2.3.0-2.3.1 log the "spm" deprecation for flores101/200 too
        "rich>=13",
        "numpy>=1.24",
        "matplotlib>=3.7",
        "aiohttp>=3.10.6",  # nmtkit serve (its stop reads a request flag new in 3.10.6), the client its tests and benchmark use
    ],
    extras_require={
        "tensorboard": ["tensorboard>=2.10"],  # nmtkit train --tensorboard DIR
        "dev": ["pytest>=7", "pytest-xdist>=3", "ruff>=0.4", "tensorboard>=2.10"],
    },
    entry_points={"console_scripts": ["nmtkit=nmtkit.__main__:run"]},
)
