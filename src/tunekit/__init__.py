"""tunekit: fine-tune large language models.

Layers, each importing only from the ones below it::

    cli → webui / serve → infer → export → plan → train → model → data → config

Importing the package itself is cheap (no torch): heavy modules are imported by the verbs that need them.
"""

__version__ = "0.1.0"
