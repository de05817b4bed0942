"""All configuration in one typed object, read from `RAG_*` environment variables (and `.env`) once
at start-up, in groups by stage (rag/common/groups.py says what each setting does).

Every setting keeps one flat name, its variable's in lower case (RAG_K: k, RAG_LLM_MODEL:
llm_model; `FLAT_NAMES`): the environment, `Settings(index_dir=...)` and
`settings.model_copy(update={"retrieval_mode": "dense"})` use it; code reads the groups
(`settings.retrieval.k`, `settings.llm.model`), and a flat read is an error that says where."""

import json
import os
import re
from collections.abc import Mapping
from functools import cache, lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, Self

from pydantic import AliasChoices, BaseModel, Field, ValidationError, create_model
from pydantic.fields import FieldInfo
from pydantic_core import ErrorDetails
from pydantic_settings import (
    BaseSettings,
    DotEnvSettingsSource,
    EnvSettingsSource,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    SettingsError,
)

from rag.common.errors import ConfigError
from rag.common.groups import (
    AnsweringSettings,
    FaultSettings,
    FeedbackSettings,
    IndexingSettings,
    JudgingSettings,
    LLMSettings,
    RetrievalSettings,
    ServiceSettings,
    StoreSettings,
)
from rag.common.topics import MapSettings

PROJECT_ROOT = Path(__file__).resolve().parents[2]


class Settings(BaseSettings):
    """Every setting, in the order of the data flow: the index and its store, the map, retrieval,
    judging, answering and the LLM, then the service, feedback on answers and fault tests."""

    model_config = SettingsConfigDict(extra="ignore")

    indexing: IndexingSettings = Field(default_factory=IndexingSettings)
    store: StoreSettings = Field(default_factory=StoreSettings)
    map: MapSettings = Field(default_factory=MapSettings)
    retrieval: RetrievalSettings = Field(default_factory=RetrievalSettings)
    judging: JudgingSettings = Field(default_factory=JudgingSettings)
    answering: AnsweringSettings = Field(default_factory=AnsweringSettings)
    llm: LLMSettings = Field(default_factory=LLMSettings)
    service: ServiceSettings = Field(default_factory=ServiceSettings)
    feedback: FeedbackSettings = Field(default_factory=FeedbackSettings)
    faults: FaultSettings = Field(default_factory=FaultSettings)

    def __init__(self, **values: Any) -> None:
        """The settings from RAG_* variables, .env and `values`: settings by their flat names
        (index_dir=..., retrieval_mode="dense"), or whole groups (retrieval=RetrievalSettings(...))."""
        super().__init__(**values)

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        """Keyword arguments, then RAG_* variables, then .env; each read by the flat names, then grouped."""
        flat = _flat_settings()
        sources = (init_settings, EnvSettingsSource(flat), DotEnvSettingsSource(flat))
        return tuple(_Grouped(settings_cls, source) for source in sources)

    def model_copy(self, *, update: Mapping[str, Any] | None = None, deep: bool = False) -> Self:
        """A copy with `update`'s values: settings by their flat names ({"retrieval_mode": "dense"}),
        or whole groups ({"retrieval": ...}). Not validated, as pydantic's model_copy."""
        grouped = grouped_names(dict(update or {}), strict=True)
        for group, value in grouped.items():
            if isinstance(value, dict):
                grouped[group] = getattr(self, group).model_copy(update=value)
        return super().model_copy(update=grouped, deep=deep)

    @property
    def milvus_address(self) -> str:
        return self.store.milvus_uri or str(Path(self.indexing.index_dir) / "milvus.db")

    @property
    def feedback_url(self) -> str:
        return self.feedback.db or f"sqlite:///{Path(self.indexing.index_dir).resolve() / 'feedback.db'}"

    if not TYPE_CHECKING:

        def __getattr__(self, name: str) -> Any:
            """A setting read by its flat name says where it is read: settings.k is settings.retrieval.k."""
            if name in FLAT_NAMES:
                group, field = FLAT_NAMES[name]
                raise AttributeError(f"'Settings' object has no attribute {name!r}: read settings.{group}.{field}")
            return super().__getattr__(name)


def _flat_names() -> dict[str, tuple[str, str]]:
    """Each setting's flat name (its RAG_ variable's, in lower case) -> (its group, its field)."""
    names = {}
    for group, field in Settings.model_fields.items():
        model = field.annotation
        assert isinstance(model, type) and issubclass(model, BaseModel)
        prefix = getattr(model, "flat_prefix", "")
        names.update({prefix + name: (group, name) for name in model.model_fields})
    return names


FLAT_NAMES = _flat_names()
_SECRETS = {"api_key", "llm_api_key", "milvus_token"}


def _group_field(flat: str) -> FieldInfo | None:
    if flat not in FLAT_NAMES:
        return None
    group, name = FLAT_NAMES[flat]
    model = Settings.model_fields[group].annotation
    assert isinstance(model, type) and issubclass(model, BaseModel)
    return model.model_fields[name]


def _other_names(flat: str) -> list[str]:
    """The variables besides RAG_<FLAT> that set a setting (OPENAI_BASE_URL for llm_base_url)."""
    group, name = FLAT_NAMES[flat]
    other = getattr(Settings.model_fields[group].annotation, "also_read", {}).get(name)
    return [other] if other else []


# Each name a source may give a setting by, in lower case -> its flat name (RAG_LLM_BASE_URL and
# OPENAI_BASE_URL are llm_base_url's: the environment source gives them as they are set).
_NAMES = {
    name.lower(): flat
    for flat in FLAT_NAMES
    for name in (flat, *((f"RAG_{flat}", *_other_names(flat)) if _other_names(flat) else ()))
}


@cache
def _flat_settings() -> type[BaseSettings]:
    """The settings as one flat model, never validated: what the environment sources read by
    (each setting's type says how its variable is decoded, e.g. JSON for evidence)."""

    class Flat(BaseSettings):
        model_config = SettingsConfigDict(
            env_prefix="RAG_", env_file=".env", extra="ignore", populate_by_name=True, env_nested_delimiter="__"
        )

    fields: dict[str, Any] = {}
    for flat in FLAT_NAMES:
        field = _group_field(flat)
        assert field is not None
        copied = FieldInfo.merge_field_infos(field)
        if others := _other_names(flat):
            copied.validation_alias = AliasChoices(f"RAG_{flat.upper()}", *others)
        fields[flat] = (field.annotation, copied)
    return create_model("RAG", __base__=Flat, **fields)


def grouped_names(values: dict[str, Any], strict: bool = False) -> dict[str, Any]:
    """`values` by flat name (or by group) -> by group: {"k": 3} -> {"retrieval": {"k": 3}}. A name
    that is neither stays as it is (the settings ignore it), or is a KeyError when `strict`."""
    grouped: dict[str, Any] = {}
    for key, value in values.items():
        flat = _NAMES.get(key.lower())
        if key in Settings.model_fields:  # a group given whole; a setting of it given flat wins
            earlier = grouped.get(key)
            grouped[key] = {**_as_dict(value), **earlier} if isinstance(earlier, dict) else value
        elif flat is not None:
            group, name = FLAT_NAMES[flat]
            if not isinstance(grouped.get(group), dict):
                grouped[group] = _as_dict(grouped.get(group))
            grouped[group][name] = value
        elif strict:
            raise KeyError(f"{key!r} is not a setting")
        else:
            grouped[key] = value
    return grouped


def _as_dict(value: Any) -> dict[str, Any]:
    """A group given whole (a model or a dict), to be updated by flat names; nothing: {}."""
    if value is None:
        return {}
    return dict(value) if isinstance(value, BaseModel | dict) else value


class _Grouped(PydanticBaseSettingsSource):
    """Another source's values, which it reads by flat name, put in their groups."""

    def __init__(self, settings_cls: type[BaseSettings], source: PydanticBaseSettingsSource):
        super().__init__(settings_cls)
        self.source = source

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        return None, field_name, False  # __call__ reads every field at once

    def __call__(self) -> dict[str, Any]:
        return grouped_names(self.source())


def _flat(loc: tuple) -> tuple[str, tuple]:
    """An error's location -> the flat name of its setting and the path within it (evidence: english...)."""
    if len(loc) >= 2 and loc[0] in Settings.model_fields:
        prefix = getattr(Settings.model_fields[str(loc[0])].annotation, "flat_prefix", "")
        return prefix + str(loc[1]), tuple(loc[2:])
    return str(loc[0]), tuple(loc[1:])


def _variable(loc: tuple) -> str:
    """The environment variable that sets the value at `loc` (the one set, where a setting has two)."""
    flat, rest = _flat(loc)
    if flat in FLAT_NAMES and (others := _other_names(flat)) and not rest:
        names = [f"RAG_{flat.upper()}", *others]
        return next((name for name in names if name in os.environ), names[0])
    return "RAG_" + "__".join([flat, *(str(part) for part in rest if isinstance(part, str))]).upper()


def _example(loc: tuple) -> str | None:
    """A good value for the setting at `loc`: its first documented example, else its default."""
    flat, rest = _flat(loc)
    field = _group_field(flat)
    if field is None:
        return None
    if field.examples:
        return str(field.examples[0])
    value: Any = field.get_default(call_default_factory=True)
    for part in rest:
        if not isinstance(part, str):
            break
        value = getattr(value, part, None)
    if value is None or isinstance(value, BaseModel):
        return None
    return json.dumps(value) if isinstance(value, list | bool) else str(value)


def _problem(error: ErrorDetails) -> str:
    loc = tuple(error["loc"]) or ("settings",)
    variable = _variable(loc)
    given = error.get("input")
    if _flat(loc)[0] in _SECRETS or not isinstance(given, str | int | float):
        shown = ""
    else:  # never a password inside a URL
        shown = "=" + re.sub(r"(://[^/@:]*:)[^/@]*@", r"\1***@", repr(given))
    example = _example(loc)
    hint = f"; for example {variable}={example}" if example is not None else ""
    return f"{variable}{shown}: {error['msg'].removeprefix('Value error, ')}{hint}"


def load_settings(**overrides: Any) -> Settings:
    """The settings from RAG_* variables (and `overrides`, by flat name), or ConfigError whose message
    is one line naming each bad variable, what is wrong with its value and an example of a good one."""
    try:
        settings = Settings(**overrides)
    except ValidationError as exc:
        raise ConfigError("invalid configuration: " + " | ".join(_problem(e) for e in exc.errors())) from None
    except SettingsError as exc:  # a nested setting given as JSON that does not parse
        found = re.search(r'field "(\w+)"', str(exc))
        variable = f"RAG_{found.group(1).upper()}" if found else "a RAG_* variable"
        raise ConfigError(f"invalid configuration: {variable}: not valid JSON") from None
    check_llm_titles(settings)
    return settings


def check_llm_titles(settings: Settings) -> None:
    """ConfigError when titles from an LLM are asked for with no endpoint to ask: said at start-up,
    and by `rag index --titles llm` before any work."""
    if settings.indexing.titles == "llm" and not settings.llm.base_url:
        raise ConfigError(
            "invalid configuration: RAG_TITLES=llm (or --titles llm) needs an OpenAI-compatible endpoint: "
            "set RAG_LLM_BASE_URL (and RAG_LLM_MODEL), or use derived titles"
        )


@lru_cache
def get_settings() -> Settings:
    return load_settings()
