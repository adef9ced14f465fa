"""Settings and profiles: one table of defaults, YAML profiles layered on top.

settings.py holds the table (`Settings`, one line per setting), spec.py how a value
is checked and worded, files.py where profile files live and how they are read,
resolve.py the layering: defaults < profile (`extends:` chains) < command line.
"""

from specli.profiles.files import (
    DEFAULT_PROFILE,
    PROFILE_NAME_RE,
    ProfileInfo,
    find_profile,
    list_profiles,
    shipped_dir,
    user_dir,
)
from specli.profiles.resolve import (
    CLI_SOURCE,
    DEFAULTS_SOURCE,
    META_KEYS,
    DeprecatedKey,
    load_profile,
    resolve_settings,
    validate_file,
)
from specli.profiles.settings import (
    DEPRECATED_KEYS,
    DRAFTERS,
    FLASH_ATTN,
    KV_TYPES,
    NEEDS_DRAFT_MODEL,
    RELOAD_KEYS,
    SETTING_NAMES,
    SPECS,
    VERIFY_MODES,
    FieldInfo,
    Settings,
    describe_fields,
    needs_draft_model,
    reads_history,
    setting_name,
    settings_to_dict,
)
from specli.profiles.spec import Spec

__all__ = [
    "CLI_SOURCE",
    "DEFAULTS_SOURCE",
    "DEFAULT_PROFILE",
    "DEPRECATED_KEYS",
    "DRAFTERS",
    "FLASH_ATTN",
    "KV_TYPES",
    "META_KEYS",
    "NEEDS_DRAFT_MODEL",
    "PROFILE_NAME_RE",
    "RELOAD_KEYS",
    "SETTING_NAMES",
    "SPECS",
    "VERIFY_MODES",
    "DeprecatedKey",
    "FieldInfo",
    "ProfileInfo",
    "Settings",
    "Spec",
    "describe_fields",
    "find_profile",
    "list_profiles",
    "load_profile",
    "needs_draft_model",
    "reads_history",
    "resolve_settings",
    "setting_name",
    "settings_to_dict",
    "shipped_dir",
    "user_dir",
    "validate_file",
]
