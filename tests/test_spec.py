"""Pipeline file validation: every problem reported with file, line, key and a suggestion."""

from __future__ import annotations

import json
import textwrap

import pytest

import gpupipe as gp
from gpupipe.spec import apply_overrides, json_schema
from gpupipe.stages import LengthFilter, NormalizeText

GOOD = """\
version: 1
name: t
input:
  path: data/sample/*.jsonl.gz
  id_column: id
stages:
  - stage: normalize_text
    form: NFKC
  - stage: length_filter
    min_words: 20
output:
  path: out/t
"""


def write(tmp_path, text, name="p.yaml"):
    p = tmp_path / name
    p.write_text(textwrap.dedent(text))
    return p


def spec_error(tmp_path, text) -> str:
    with pytest.raises(gp.SpecError) as e:
        gp.Pipeline.from_yaml(write(tmp_path, text))
    return str(e.value)


def test_valid_file_loads_with_typed_stages(tmp_path):
    p = gp.Pipeline.from_yaml(write(tmp_path, GOOD))
    assert p.stages == [NormalizeText(form="NFKC"), LengthFilter(min_words=20)]
    assert p.input.resolved_format() == "jsonl"
    assert p.cluster.kind == "local" and p.backend == "auto"


def test_unknown_stage_suggests_closest_name(tmp_path):
    msg = spec_error(tmp_path, GOOD.replace("stage: length_filter", "stage: lenght_filter"))
    assert "p.yaml:9:" in msg
    assert "unknown stage 'lenght_filter'" in msg
    assert "did you mean 'length_filter'?" in msg


def test_unknown_stage_parameter_suggests_closest(tmp_path):
    msg = spec_error(tmp_path, GOOD.replace("min_words: 20", "min_word: 20"))
    assert "p.yaml:10:" in msg
    assert "unknown key 'min_word'" in msg and "did you mean 'min_words'?" in msg


def test_bad_value_names_key_and_value(tmp_path):
    msg = spec_error(tmp_path, GOOD.replace("min_words: 20", "min_words: -3"))
    assert "p.yaml:10:" in msg and "min_words" in msg and "-3" in msg


def test_bad_literal(tmp_path):
    msg = spec_error(tmp_path, GOOD.replace("form: NFKC", "form: NFX"))
    assert "p.yaml:8:" in msg and "'NFC'" in msg and "NFX" in msg


def test_cross_field_check(tmp_path):
    msg = spec_error(tmp_path, GOOD.replace("min_words: 20", "min_words: 20\n    max_words: 5"))
    assert "min_words (20) is greater than max_words (5)" in msg


def test_unknown_top_level_and_input_keys(tmp_path):
    text = GOOD.replace("name: t", "nmae: t").replace("id_column: id", "id_colum: id")
    msg = spec_error(tmp_path, text)
    assert "2 problems" in msg
    assert "unknown key 'nmae' — did you mean 'name'?" in msg
    assert "unknown key 'id_colum' — did you mean 'id_column'?" in msg
    assert "p.yaml:2:" in msg and "p.yaml:5:" in msg


def test_missing_required(tmp_path):
    msg = spec_error(tmp_path, GOOD.replace("output:\n  path: out/t\n", ""))
    assert "missing required key 'output'" in msg


def test_cluster_kind_typo(tmp_path):
    msg = spec_error(tmp_path, GOOD + "cluster: {kind: adress, address: tcp://x:1}\n")
    assert "unknown cluster kind 'adress'" in msg and "did you mean 'address'?" in msg


def test_cluster_key_typo(tmp_path):
    msg = spec_error(tmp_path, GOOD + "cluster: {kind: local, worker: 2}\n")
    assert "unknown key 'worker'" in msg and "did you mean 'workers'?" in msg


def test_yaml_syntax_error_has_position(tmp_path):
    msg = spec_error(tmp_path, "input:\n  path: [a, b\noutput: x\n")
    assert "invalid YAML" in msg and "p.yaml:3:" in msg


def test_not_a_mapping(tmp_path):
    assert "must be a mapping" in spec_error(tmp_path, "- a\n- b\n")


def test_missing_file(tmp_path):
    with pytest.raises(gp.SpecError, match="cannot read the pipeline file"):
        gp.Pipeline.from_yaml(tmp_path / "nope.yaml")


def test_stage_entry_without_name(tmp_path):
    msg = spec_error(tmp_path, GOOD.replace("- stage: normalize_text\n", "- form_: x\n"))
    assert "stages[0]" in msg and "'stage' key" in msg


def test_overrides_by_path_and_by_stage_name(tmp_path):
    p = gp.Pipeline.from_yaml(write(tmp_path, GOOD), overrides=[
        "length_filter.min_words=50", "stages.0.form=NFC", "input.on_error=skip",
        "cluster.workers=3"])
    assert p.stages[1].min_words == 50 and p.stages[0].form == "NFC"
    assert p.input.on_error == "skip" and p.cluster.workers == 3


def test_override_errors():
    with pytest.raises(gp.SpecError, match="expected key=value"):
        apply_overrides({}, ["output.path"])
    with pytest.raises(gp.SpecError, match="not a position"):
        apply_overrides({"stages": [{"stage": "a"}]}, ["stages.4.x=1"])
    with pytest.raises(gp.SpecError, match="more than once"):
        apply_overrides({"stages": [{"stage": "a"}, {"stage": "a"}]}, ["a.x=1"])


def test_overridden_value_is_validated(tmp_path):
    with pytest.raises(gp.SpecError, match="min_words"):
        gp.Pipeline.from_yaml(write(tmp_path, GOOD), overrides=["length_filter.min_words=many"])


def test_python_and_yaml_forms_agree(tmp_path):
    from_yaml = gp.Pipeline.from_yaml(write(tmp_path, GOOD))
    in_python = gp.Pipeline(
        name="t", input=gp.spec.InputSpec(path="data/sample/*.jsonl.gz", id_column="id"),
        stages=[NormalizeText(form="NFKC"), LengthFilter(min_words=20)], output="out/t")
    assert from_yaml.to_dict() == in_python.to_dict()
    again = gp.Pipeline.from_dict(json.loads(json.dumps(in_python.to_dict())))
    assert again.to_dict() == in_python.to_dict()
    assert gp.Pipeline.from_dict(__import__("yaml").safe_load(from_yaml.to_yaml())) == from_yaml


def test_python_stage_dicts_are_validated():
    with pytest.raises(gp.SpecError, match="did you mean 'length_filter'"):
        gp.Pipeline(input="x.jsonl", output="o", stages=[{"stage": "length_filtr"}])


def test_stage_objects_validate_at_construction():
    with pytest.raises(ValueError, match="min_words"):
        LengthFilter(min_words=-1)
    with pytest.raises(ValueError, match="Unexpected keyword"):
        LengthFilter(min_wordz=1)
    import dataclasses

    with pytest.raises(dataclasses.FrozenInstanceError):
        LengthFilter().min_words = 3  # type: ignore[misc]


def test_json_schema_lists_every_stage():
    schema = json_schema()
    variants = schema["properties"]["stages"]["items"]["oneOf"]
    names = {v["properties"]["stage"]["const"] for v in variants}
    assert names == set(gp.stage_names())
    lf = next(v for v in variants if v["title"] == "length_filter")
    assert lf["additionalProperties"] is False and "min_words" in lf["properties"]
    json.dumps(schema)  # serialisable


def test_quickstart_pipeline_is_valid():
    p = gp.Pipeline.from_yaml("pipelines/quickstart.yaml")
    assert [s.stage_name for s in p.stages] == ["normalize_text", "length_filter", "tokenize"]
    assert p.output.shards.num_shards == 4


@pytest.mark.parametrize("path", sorted(__import__("glob").glob("pipelines/*.yaml")))
def test_every_example_pipeline_is_valid(path):
    p = gp.Pipeline.from_yaml(path)
    assert p.stages and "plan" in p.explain()
