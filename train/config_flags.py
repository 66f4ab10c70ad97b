"""absl flags generated from configuration dataclasses: every setting is declared once.

A configuration dataclass declares each setting with `setting`, its help text and (for a closed
set of values) its choices in the field's metadata:

    batch_size: int = setting(128, "GLOBAL batch size.")
    loss: str = setting("sampled_softmax", "Training loss.", choices=LOSSES)

Leaf types: bool, int, float, str, Optional[...] of those (None = unset) and Tuple[int, ...] /
Tuple[str, ...] (a comma-separated list flag). A field whose type is itself a configuration
dataclass is nested: its leaves become flags of their own (names must be unique over the tree).

* `define_flags(cls)` defines one absl flag per leaf (bool -> DEFINE_bool, choices -> DEFINE_enum,
  tuple -> DEFINE_list, ...).
* `from_flags(cls)` builds the configuration from the parsed flags (the dataclass validates it).
* `to_flags(config)` writes it back as ["--name=value", ...], so scripts never spell flags by hand:
  parsing `to_flags(c)` gives back c.
* `coerce(config)` checks and normalises the field types (numpy integers are integers, lists
  become tuples); configuration dataclasses call it from `__post_init__`.
"""

from __future__ import annotations

import dataclasses
import numbers
import sys
import typing
from typing import Any, Dict, Iterator, Optional, Sequence, Tuple

from absl import flags

__all__ = [
  "Leaf",
  "coerce",
  "define_flags",
  "expose_in_help",
  "from_dict",
  "from_flags",
  "leaves",
  "parse",
  "present_settings",
  "setting",
  "to_flags",
]

# The flags defined here belong to the module that calls define_flags (so --help lists them).
flags.disclaim_key_flags()


def setting(
  default,
  help: str,
  *,
  choices: Optional[Sequence[str]] = None,
  flag: Optional[str] = None,
):
  """A dataclass field with its flag's help text, choices and (optionally) flag name."""
  if not isinstance(help, str) or not help:
    raise ValueError("every setting needs a help text")
  metadata = {"help": help}
  if choices is not None:
    metadata["choices"] = tuple(choices)
  if flag is not None:
    metadata["flag"] = flag
  if isinstance(default, (list, dict, set)):
    raise TypeError("use an immutable default (a tuple) for list settings")
  return dataclasses.field(default=default, metadata=metadata)


@dataclasses.dataclass(frozen=True)
class Leaf:
  """One flag: where it lives in the configuration tree and how to parse it."""

  path: Tuple[str, ...]  # attribute names from the root configuration
  flag: str  # the flag's name
  kind: type  # bool, int, float, str or tuple
  item: Optional[type]  # element type of a tuple setting
  optional: bool  # None is a valid value
  default: Any
  help: str
  choices: Optional[Tuple[str, ...]]


def _unwrap_optional(tp) -> Tuple[Any, bool]:
  if typing.get_origin(tp) is typing.Union:
    args = [a for a in typing.get_args(tp) if a is not type(None)]
    if len(args) == 1 and len(typing.get_args(tp)) == 2:
      return args[0], True
    raise TypeError(f"unsupported union type {tp}")
  return tp, False


def _default_of(field: dataclasses.Field):
  if field.default is not dataclasses.MISSING:
    return field.default
  if field.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
    return field.default_factory()  # type: ignore[misc]
  raise TypeError(f"setting {field.name!r} has no default")


def leaves(cls, prefix: Tuple[str, ...] = ()) -> Iterator[Leaf]:
  """The flags of configuration dataclass ``cls`` (nested dataclasses flattened), in order."""
  hints = typing.get_type_hints(cls)
  for field in dataclasses.fields(cls):
    if not field.init:
      continue
    tp, optional = _unwrap_optional(hints[field.name])
    if dataclasses.is_dataclass(tp):
      yield from leaves(tp, prefix + (field.name,))
      continue
    if "help" not in field.metadata:
      raise TypeError(f"{cls.__name__}.{field.name} is not declared with setting()")
    item = None
    if typing.get_origin(tp) in (tuple, Tuple):
      args = typing.get_args(tp)
      if len(args) != 2 or args[1] is not Ellipsis or args[0] not in (int, str, float):
        raise TypeError(f"{cls.__name__}.{field.name}: use Tuple[int, ...] / Tuple[str, ...]")
      kind, item = tuple, args[0]
    elif tp in (bool, int, float, str):
      kind = tp
    else:
      raise TypeError(f"{cls.__name__}.{field.name}: unsupported setting type {tp}")
    yield Leaf(
      path=prefix + (field.name,),
      flag=field.metadata.get("flag", field.name),
      kind=kind,
      item=item,
      optional=optional,
      default=_default_of(field),
      help=field.metadata["help"],
      choices=field.metadata.get("choices"),
    )


def _by_flag(cls) -> Dict[str, Leaf]:
  out: Dict[str, Leaf] = {}
  for leaf in leaves(cls):
    if leaf.flag in out:
      raise TypeError(f"{cls.__name__}: two settings use the flag name {leaf.flag!r}")
    out[leaf.flag] = leaf
  return out


def define_flags(
  cls,
  flag_values: flags.FlagValues = flags.FLAGS,
  *,
  exclude: Sequence[str] = (),
  defaults: Optional[Dict[str, Any]] = None,
  help_note: str = "",
) -> Tuple[str, ...]:
  """Defines one absl flag per setting of ``cls``; returns the flag names defined.

  The flags are the key flags of the calling module (listed by its --help).

  Args:
    cls: a configuration dataclass.
    flag_values: where to define them (absl's global FLAGS by default).
    exclude: flag names not to define (settings a binary fixes itself).
    defaults: flag name -> default overriding the dataclass default (None = unset).
    help_note: appended to every help text (e.g. where an unset flag takes its value from).
  """
  leaves_ = _by_flag(cls)
  defaults = dict(defaults or {})
  unknown = (set(exclude) | set(defaults)) - set(leaves_)
  if unknown:
    raise ValueError(f"{cls.__name__} has no settings named {sorted(unknown)}")
  defined = []
  for name, leaf in leaves_.items():
    if name in exclude:
      continue
    default = defaults.get(name, leaf.default)
    text = leaf.help + (f" {help_note}" if help_note else "")
    if leaf.kind is bool:
      flags.DEFINE_bool(name, default, text, flag_values=flag_values)
    elif leaf.kind is tuple:
      value = None if default is None else [str(v) for v in default]
      flags.DEFINE_list(name, value, text, flag_values=flag_values)
    elif leaf.choices is not None:
      flags.DEFINE_enum(name, default, list(leaf.choices), text, flag_values=flag_values)
    elif leaf.kind is int:
      flags.DEFINE_integer(name, default, text, flag_values=flag_values)
    elif leaf.kind is float:
      flags.DEFINE_float(name, default, text, flag_values=flag_values)
    else:
      flags.DEFINE_string(name, default, text, flag_values=flag_values)
    defined.append(name)
  return tuple(defined)


def expose_in_help(module_name: str, flag_values: flags.FlagValues = flags.FLAGS) -> None:
  """Lists the flags of module ``module_name`` in --help when it is not the main script.

  absl's --help shows the key flags of sys.argv[0]; a console script (e.g. tfrs-logq-train)
  is a wrapper that imports the binary's module, so its flags are registered under the module's
  name instead. Call this from the console-script entry point.
  """
  main = sys.argv[0] if sys.argv else ""
  if not main or module_name in ("__main__", main):
    return
  for flag in flag_values.get_key_flags_for_module(module_name):  # its own and declared ones
    if flag not in flag_values.get_key_flags_for_module(main):
      flag_values.register_key_flag_for_module(main, flag)


def _from_flag_value(leaf: Leaf, value):
  if leaf.kind is tuple and value is not None:
    return tuple(leaf.item(v) for v in value)  # type: ignore[misc]
  return value


def present_settings(cls, flag_values: flags.FlagValues = flags.FLAGS) -> Dict[str, Any]:
  """flag name -> value of the flags of ``cls`` given on the command line."""
  out = {}
  for name, leaf in _by_flag(cls).items():
    if name in flag_values and flag_values[name].present:
      out[name] = _from_flag_value(leaf, flag_values[name].value)
  return out


def from_dict(cls, values: Dict[str, Any], *, base=None, strict: bool = True):
  """Builds ``cls`` from flat settings (flag name -> value) on top of ``base`` (or defaults).

  Raises:
    TypeError: an unknown setting name (with ``strict``).
  """
  leaves_ = _by_flag(cls)
  unknown = set(values) - set(leaves_)
  if unknown and strict:
    raise TypeError(f"{cls.__name__} has no settings named {sorted(unknown)}")
  tree: Dict[str, Any] = {} if base is None else _as_tree(base)
  for name, value in values.items():
    if name not in leaves_:
      continue
    node = tree
    path = leaves_[name].path
    for part in path[:-1]:
      node = node.setdefault(part, {})
    node[path[-1]] = value
  return _build(cls, tree)


def _as_tree(config) -> Dict[str, Any]:
  out = {}
  for field in dataclasses.fields(config):
    value = getattr(config, field.name)
    out[field.name] = _as_tree(value) if dataclasses.is_dataclass(value) else value
  return out


def _build(cls, tree: Dict[str, Any]):
  hints = typing.get_type_hints(cls)
  kwargs = {}
  for field in dataclasses.fields(cls):
    if field.name not in tree:
      continue
    tp, _ = _unwrap_optional(hints[field.name])
    value = tree[field.name]
    if dataclasses.is_dataclass(tp) and isinstance(value, dict):
      value = _build(tp, value)
    kwargs[field.name] = value
  return cls(**kwargs)


def from_flags(
  cls, flag_values: flags.FlagValues = flags.FLAGS, *, base=None, only_present: bool = False
):
  """The configuration from parsed flags (flags not defined keep ``base``'s or the defaults).

  With ``only_present``, only the flags given on the command line are taken.
  """
  if only_present:
    return from_dict(cls, present_settings(cls, flag_values), base=base)
  values = {
    name: _from_flag_value(leaf, flag_values[name].value)
    for name, leaf in _by_flag(cls).items()
    if name in flag_values
  }
  return from_dict(cls, values, base=base)


def _format(leaf: Leaf, value) -> str:
  if leaf.kind is bool:
    return "true" if value else "false"
  if leaf.kind is tuple:
    return ",".join(str(v) for v in value)
  return repr(value) if leaf.kind is float else str(value)


def to_flags(config, *, exclude: Sequence[str] = (), only_changed: bool = False) -> list:
  """["--name=value", ...] for every setting of ``config`` (see module docstring).

  Settings that are None are left out (an unset flag is None); ``only_changed`` also leaves out
  those equal to the dataclass default.
  """
  out = []
  tree = _as_tree(config)
  for name, leaf in _by_flag(type(config)).items():
    if name in exclude:
      continue
    value = tree
    for part in leaf.path:
      value = value[part]
    if value is None:
      if leaf.default is not None and not only_changed:
        raise ValueError(f"setting {name!r} is None but its flag cannot be unset")
      continue
    if only_changed and value == leaf.default:
      continue
    out.append(f"--{name}={_format(leaf, value)}")
  return out


def parse(cls, argv: Sequence[str]):
  """The configuration that ``argv`` (["--name=value", ...]) gives in a fresh flag namespace."""
  flag_values = flags.FlagValues()
  define_flags(cls, flag_values)
  flag_values(["prog", *argv])
  return from_flags(cls, flag_values)


def coerce(config) -> None:
  """Checks the type of every setting of ``config`` in place (not nested ones).

  int settings accept any integral number except bool (numpy integers included); float settings
  any real number; tuple settings any sequence (stored as a tuple). Choices are checked.

  Raises:
    TypeError: a value of the wrong type, naming the setting.
    ValueError: a value outside the setting's choices.
  """
  hints = typing.get_type_hints(type(config))
  for field in dataclasses.fields(config):
    tp, optional = _unwrap_optional(hints[field.name])
    value = getattr(config, field.name)
    if dataclasses.is_dataclass(tp):
      if not isinstance(value, tp):
        raise TypeError(f"{field.name} must be a {tp.__name__}, got {type(value).__name__}")
      continue
    if value is None:
      if not optional:
        raise TypeError(f"{field.name} must not be None")
      continue
    setattr(config, field.name, _coerce_value(field.name, tp, value))
    choices = field.metadata.get("choices")
    if choices is not None and getattr(config, field.name) not in choices:
      raise ValueError(f"{field.name} must be one of {list(choices)}, got {value!r}")


def _coerce_value(name: str, tp, value):
  if tp is bool:
    if isinstance(value, (bool,)) or type(value).__name__ == "bool_":
      return bool(value)
    raise TypeError(f"{name} must be a bool, got {value!r}")
  if tp is int:
    if (
      isinstance(value, numbers.Integral)
      and not isinstance(value, bool)
      and type(value).__name__ != "bool_"
    ):
      return int(value)
    raise TypeError(f"{name} must be an integer, got {value!r}")
  if tp is float:
    if isinstance(value, numbers.Real) and not isinstance(value, bool):
      return float(value)
    raise TypeError(f"{name} must be a number, got {value!r}")
  if tp is str:
    if isinstance(value, str):
      return value
    raise TypeError(f"{name} must be a string, got {value!r}")
  item = typing.get_args(tp)[0]
  if isinstance(value, (str, bytes)) or not hasattr(value, "__iter__"):
    raise TypeError(f"{name} must be a sequence of {item.__name__}, got {value!r}")
  return tuple(_coerce_value(f"{name}[{k}]", item, v) for k, v in enumerate(value))
