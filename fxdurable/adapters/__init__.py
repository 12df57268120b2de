"""Adapters that make agents written with other frameworks durable (optional extras).

Each adapter is its own subpackage, imported only by name (``import fxdurable`` loads none of
them), and checks the framework's installed version before it imports the framework:
:mod:`fxdurable.adapters.pydantic_ai` (``pip install 'fxdurable[pydantic-ai]'``),
:mod:`fxdurable.adapters.openai_agents` (``'fxdurable[openai-agents]'``) and
:mod:`fxdurable.adapters.langchain` (``'fxdurable[langchain]'``).
"""
