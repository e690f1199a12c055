"""Component registries: one name -> factory table per kind, open to third-party packages.

Every extensible kind of component (dataset loaders, retrievers, selectors,
answer metrics, retrieval metrics, encoders) has one :class:`Registry`.  Our
own components register under a name in the module that defines them; an
installed package adds its own by declaring an entry point in the kind's
group, with no edit to our code::

    # pyproject.toml of the plugin package
    [project.entry-points."qa_retrieval_eval.selectors"]
    my-selector = "my_package.selectors:MySelector"

Entry points are read once, on the first look-up of a name the built-in
table does not have.  A built-in name wins over a plugin of the same name.

:func:`typed_options` turns spec-string options (``bm25[k1=1.2]``,
``threshold:0.8,25``) into the types of a constructor's parameters, so spec
strings, bracket options and configuration keys are all derived from the
constructors themselves: a parameter has one name everywhere.
"""

from __future__ import annotations

import inspect
import types
import typing
from importlib import metadata
from typing import Any, Callable, Generic, Iterator, Mapping, TypeVar

from data.errors import UserError

T = TypeVar("T")

GROUP_PREFIX = "qa_retrieval_eval."


class Registry(Generic[T]):
    """Names -> components of one kind (built-in ones and those of the entry-point group ``qa_retrieval_eval.<kind>``)."""

    def __init__(self, kind: str, group: str | None = None, *, what: str | None = None):
        self.kind = kind  # e.g. "selectors"
        self.group = group or GROUP_PREFIX + kind
        self.what = what or kind.rstrip("s").replace("_", " ")  # e.g. "selector", "answer metric"
        self._items: dict[str, T] = {}
        self._plugins: dict[str, metadata.EntryPoint] | None = None
        self._loaded: dict[str, T] = {}  # plugins loaded so far (kept apart from the built-ins)

    # -- registration ---------------------------------------------------------
    def register(self, name: str, item: T | str | None = None):
        """``registry.register("top", TopN)``, ``registry.register("top", "selection.top:TopN")`` (imported on
        first use, so a registry never imports the modules it names) or as a decorator ``@registry.register("top")``."""
        if item is None:
            def decorate(obj: T) -> T:
                self._items[name] = obj
                return obj

            return decorate
        self._items[name] = item
        return item

    # -- look-up --------------------------------------------------------------
    def plugins(self) -> dict[str, metadata.EntryPoint]:
        """The entry points of installed packages in this registry's group (read once)."""
        if self._plugins is None:
            self._plugins = {ep.name: ep for ep in metadata.entry_points(group=self.group)}
        return self._plugins

    def reload_plugins(self) -> None:
        """Forget the entry points read and the plugins loaded so far (after installing a plugin in a running process)."""
        self._plugins = None
        self._loaded = {}

    def get(self, name: str) -> T:
        """The component registered as ``name`` (a one-line error listing the known names otherwise)."""
        found = self.find(name)
        if found is None:
            raise UserError(f"unknown {self.what} {name!r} (known: {', '.join(self.names())})")
        return found

    def find(self, name: str) -> T | None:
        if name in self._items:
            item = self._items[name]
            if isinstance(item, str) and ":" in item:  # "module:attribute", imported on first use
                item = self._items[name] = load_object(item)
            return item
        if name in self._loaded:
            return self._loaded[name]
        ep = self.plugins().get(name)
        if ep is None:
            return None
        try:
            item = ep.load()
        except Exception as e:  # a broken plugin install is the user's to fix, in one line
            raise UserError(f"{self.what} {name!r}: entry point {ep.value} ({self.group}) cannot be loaded "
                            f"({type(e).__name__}: {e})") from None
        self._loaded[name] = item
        return item

    def names(self) -> list[str]:
        return sorted(set(self._items) | set(self.plugins()))

    def builtin_names(self) -> list[str]:
        return list(self._items)

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and self.find(name) is not None

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def items(self) -> list[tuple[str, T]]:
        return [(name, self.get(name)) for name in self.names()]

    def values(self) -> list[T]:
        return [self.get(name) for name in self.names()]


def load_object(path: str) -> Any:
    """The object a ``"module:attribute"`` path names (imported now)."""
    import importlib

    module, _, attr = path.partition(":")
    return getattr(importlib.import_module(module), attr)


# --------------------------------------------------------------- typed options
_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")


def parameters(factory: Callable[..., Any], *, skip: tuple[str, ...] = ()) -> dict[str, inspect.Parameter]:
    """The keyword parameters of a class's constructor (or a function), minus ``self`` and ``skip``."""
    target = factory.__init__ if inspect.isclass(factory) else factory
    params = inspect.signature(target).parameters
    return {n: p for n, p in params.items() if n != "self" and n not in skip
            and p.kind not in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)}


def _type_hints(factory: Callable[..., Any]) -> dict[str, Any]:
    """The resolved annotations of a constructor or function (empty when they cannot be resolved)."""
    target = factory.__init__ if inspect.isclass(factory) else factory
    try:
        return typing.get_type_hints(target)
    except Exception:
        return {}


def coerce(value: Any, annotation: Any, default: Any, field: str) -> Any:
    """A spec-string value as the parameter's type (from its annotation, else its default); non-strings pass."""
    if not isinstance(value, str):
        return value
    text = value.strip()
    types = _types_of(annotation, default)
    if text.lower() in ("none", "null") and (type(None) in types or default is None):
        return None
    if str in types and not (types & {int, float, bool}):
        return value  # strings stay as written (prompts keep their spaces)
    if bool in types:
        if text.lower() in _TRUE:
            return True
        if text.lower() in _FALSE:
            return False
        if str in types:
            return value
        raise UserError(f"{field}: expected true/false, got {value!r}")
    if int in types:
        try:
            return int(text)
        except ValueError:
            if float not in types:
                if str in types:
                    return value
                raise UserError(f"{field}: expected an integer, got {value!r}") from None
    if float in types:
        try:
            return float(text)
        except ValueError:
            if str in types:
                return value
            raise UserError(f"{field}: expected a number, got {value!r}") from None
    return value


def _types_of(annotation: Any, default: Any) -> set:
    out: set = set()
    if annotation is not inspect.Parameter.empty and annotation is not None:
        union = typing.get_origin(annotation) in (typing.Union, types.UnionType)
        for t in (typing.get_args(annotation) if union else (annotation,)):
            origin = typing.get_origin(t)
            out.add(origin or t)
    if not out or out == {Any}:
        if isinstance(default, bool):
            out = {bool}
        elif isinstance(default, int):
            out = {int, float}
        elif isinstance(default, float):
            out = {float}
        elif isinstance(default, str):
            out = {str}
        elif default is None:
            out = {int, float, str, type(None)}
    return out


def typed_options(factory: Callable[..., Any], options: Mapping[str, Any] | None, what: str, *,
                  skip: tuple[str, ...] = ()) -> dict[str, Any]:
    """``options`` (spec strings or values) checked against and converted to ``factory``'s parameters.

    Keys may use ``-`` or ``_``; an unknown key is a one-line error naming the allowed ones.
    """
    params = parameters(factory, skip=skip)
    hints = _type_hints(factory) if options else {}
    out: dict[str, Any] = {}
    for key, value in (options or {}).items():
        name = str(key).replace("-", "_")
        if name not in params:
            raise UserError(f"{what}: unknown option {key!r} (allowed: {', '.join(params) or 'none'})")
        p = params[name]
        default = None if p.default is inspect.Parameter.empty else p.default
        out[name] = coerce(value, hints.get(name, p.annotation), default, f"{what} option {name}")
    return out


def positional_options(factory: Callable[..., Any], values: list[str], what: str, *,
                       skip: tuple[str, ...] = ()) -> dict[str, Any]:
    """Spec arguments ``a,b,key=c`` as ``factory``'s parameters: positional ones in signature order, then by name."""
    params = list(parameters(factory, skip=skip))
    named: dict[str, str] = {}
    position = 0
    for value in values:
        key, eq, rest = value.partition("=")
        if eq and key.strip().replace("-", "_") in params:
            named[key.strip()] = rest
            continue
        if position >= len(params):
            raise UserError(f"{what}: too many arguments ({len(values)}; it takes {', '.join(params) or 'none'})")
        named[params[position]] = value
        position += 1
    return typed_options(factory, named, what, skip=skip)


def bracket_options(spec: str, what: str) -> tuple[str, dict[str, str]]:
    """A spec's bracketed options: ``"dense:e5[query_prompt=query: ,k=2]"`` -> ``("dense:e5", {"query_prompt": "query: ", "k": "2"})``
    (values kept as written; quote one, '...' or "...", to hold "," or "]"; ``what`` names the kind in errors)."""
    if not spec.endswith("]") or "[" not in spec:
        return spec, {}
    start = spec.index("[")
    body = spec[start + 1 : -1]
    items, quote, cur = [], "", []
    for ch in body:
        if quote:
            if ch == quote:
                quote = ""
            cur.append(ch)
        elif ch in "'\"" and "".join(cur).endswith("="):
            quote = ch
            cur.append(ch)
        elif ch == ",":
            items.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    if quote:
        raise UserError(f"{what} {spec!r}: unclosed quote in its options")
    items.append("".join(cur))
    options: dict[str, str] = {}
    for item in items:
        if not item.strip():
            continue
        key, eq, value = item.partition("=")
        key = key.strip()
        if not eq or not key:
            raise UserError(f"{what} {spec!r}: option {item!r} is not KEY=VALUE")
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        options[key.replace("-", "_")] = value
    return spec[:start], options


def build(factory: Callable[[...], T], options: Mapping[str, Any] | None, what: str, **fixed: Any) -> T:
    """``factory(**fixed, **typed_options(options))``; a constructor's own TypeError becomes one line."""
    kwargs = {**fixed, **typed_options(factory, options, what, skip=tuple(fixed))}
    try:
        return factory(**kwargs)
    except TypeError as e:
        raise UserError(f"{what}: {e}") from None
