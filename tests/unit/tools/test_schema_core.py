"""schema_for: required unless defaulted, descriptions from Field, nested models inlined."""

from __future__ import annotations

import json
from typing import Literal

from pydantic import BaseModel, Field

from shelly_dist.tools import schema_for


class Inner(BaseModel):
    path: str = Field(description="a file path")
    line: int = 0


class Outer(BaseModel):
    target: Inner = Field(description="where to look")
    others: list[Inner] = []
    maybe: Inner | None = None
    mode: Literal["fast", "slow"] = "fast"
    note: str = Field("", description="a remark")


class Node(BaseModel):
    label: str
    children: list[Node] = []


def test_top_level_is_an_object_schema() -> None:
    assert schema_for(Inner)["type"] == "object"


def test_a_model_without_fields_still_has_properties() -> None:
    class Empty(BaseModel):
        pass

    assert schema_for(Empty) == {"type": "object", "properties": {}}


def test_field_is_required_unless_it_has_a_default() -> None:
    assert schema_for(Inner)["required"] == ["path"]
    assert schema_for(Outer)["required"] == ["target"]


def test_descriptions_come_from_field() -> None:
    props = schema_for(Outer)["properties"]
    assert props["target"]["description"] == "where to look"
    assert props["note"]["description"] == "a remark"
    assert props["target"]["properties"]["path"]["description"] == "a file path"


def test_nested_models_are_inlined_without_ref() -> None:
    schema = schema_for(Outer)
    text = json.dumps(schema)
    assert "$ref" not in text and "$defs" not in text
    assert schema["properties"]["others"]["items"]["properties"]["path"]["type"] == "string"
    assert schema["properties"]["target"]["required"] == ["path"]


def test_optional_nested_model_is_inlined_inside_any_of() -> None:
    any_of = schema_for(Outer)["properties"]["maybe"]["anyOf"]
    assert {"type": "null"} in any_of
    assert any(branch.get("properties", {}).get("path") for branch in any_of)


def test_titles_are_dropped_but_a_field_named_title_is_kept() -> None:
    class Doc(BaseModel):
        title: str = Field(description="the heading")

    schema = schema_for(Doc)
    assert "title" not in schema
    assert schema["properties"]["title"] == {"type": "string", "description": "the heading"}


def test_literal_becomes_an_enum() -> None:
    assert schema_for(Outer)["properties"]["mode"]["enum"] == ["fast", "slow"]


def test_default_values_are_kept_as_data() -> None:
    class WithDefault(BaseModel):
        options: dict[str, str] = {"title": "kept"}

    assert schema_for(WithDefault)["properties"]["options"]["default"] == {"title": "kept"}


def test_a_field_named_like_a_schema_keyword_is_still_inlined() -> None:
    class Keywords(BaseModel):
        default: Inner
        enum: Inner

    props = schema_for(Keywords)["properties"]
    assert props["default"]["properties"]["path"]["type"] == "string"
    assert props["enum"]["properties"]["path"]["type"] == "string"


def test_self_referencing_model_is_cut_at_its_second_appearance() -> None:
    schema = schema_for(Node)
    assert "$ref" not in json.dumps(schema)
    assert schema["properties"]["label"]["type"] == "string"
    assert schema["properties"]["children"]["items"]["type"] == "object"
