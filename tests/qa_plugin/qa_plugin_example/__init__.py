"""An example third-party package extending qa-retrieval-eval through entry points (see docs/extending.md).

Put ``tests/qa_plugin`` on ``sys.path`` (or ``PYTHONPATH``) and its ``*.dist-info`` makes
``importlib.metadata`` see the entry points, as ``pip install`` of a real package would.
"""
