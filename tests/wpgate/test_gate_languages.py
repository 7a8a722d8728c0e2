"""The per-language test scanners: text in, the test names a gate may use out."""

from __future__ import annotations

import re

from wpgate._gate_languages import (
    bats_tests,
    go_subtest,
    go_tests,
    javascript_tests,
    pattern_tests,
    rust_tests,
)

GO = """package calc

import (
    "testing"
    tst "testing"
)

func TestAdd(t *testing.T) {}
func TestSub(tt *tst.T) {}
func Test_underscore(t *testing.T) {}
func TestUnnamed(*testing.T) {}
func Testlower(t *testing.T) {}
func TestMain(m *testing.M) {}
func TestWrongType(b *testing.B) {}
func BenchmarkAdd(b *testing.B) {}
func FuzzParse(f *testing.F) {}
func ExampleAdd() {}
func helper(t *testing.T) {}
func (s *Suite) TestMethod(t *testing.T) {}
// func TestInComment(t *testing.T) {}
/* func TestInBlock(t *testing.T) {} */
var s = `
func TestInRawString(t *testing.T) {}
`
"""


def test_go_accepts_tests_benchmarks_fuzz_targets_and_examples() -> None:
    assert go_tests(GO) == {
        "TestAdd",
        "TestSub",
        "Test_underscore",
        "TestUnnamed",
        "BenchmarkAdd",
        "FuzzParse",
        "ExampleAdd",
    }


def test_go_subtest_names_its_function() -> None:
    assert go_subtest("TestAdd/negative numbers") == "TestAdd"
    assert go_subtest("TestAdd") == "TestAdd"


RUST = """
fn helper() {}

#[test]
fn top_level() {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[should_panic(expected = "boom")]
    fn panics() { let s = "}"; let c = '}'; }

    #[tokio::test(flavor = "multi_thread")]
    async fn with_tokio<'a>() {}

    #[ignore]
    #[test]
    pub fn ignored_after() {}

    fn not_a_test() {}

    mod inner {
        #[wasm_bindgen_test]
        fn in_browser() {}
    }

    // #[test]
    // fn commented() {}
    const DOC: &str = r#"#[test] fn in_raw_string() {}"#;
}

#[test]
fn after_the_module() {}
"""


def test_rust_reads_test_attributes_and_module_paths() -> None:
    assert rust_tests(RUST) == {
        "top_level",
        "panics",
        "tests::panics",
        "with_tokio",
        "tests::with_tokio",
        "ignored_after",
        "tests::ignored_after",
        "in_browser",
        "tests::inner::in_browser",
        "after_the_module",
    }


JS = """
import { describe, it, test, expect } from "vitest";

test("adds two numbers", () => { expect(1 + 1).toBe(2); });
it('handles single quotes', () => {});
test(`uses a backtick`, () => {});
test(`interpolates ${name}`, () => {});
test.only("runs alone", () => {});
it.skip("is skipped", () => {});
/^x/.test("not a test");
// test("in a comment")
const s = 'test("in a string")';

describe("Calculator", () => {
  it("multiplies", () => { if ((1)) {} });
  describe('nested', function () {
    test("divides", () => {});
  });
  test("after the nested group", () => {});
});
test("outside again", () => {});
"""


def test_javascript_reads_calls_with_literal_names_and_nesting() -> None:
    names = javascript_tests(JS)
    for name in (
        "adds two numbers",
        "handles single quotes",
        "uses a backtick",
        "runs alone",
        "is skipped",
        "Calculator",
        "multiplies",
        "Calculator multiplies",
        "Calculator::multiplies",
        "Calculator nested divides",
        "Calculator::nested::divides",
        "Calculator::after the nested group",
        "outside again",
    ):
        assert name in names, name
    for name in (
        "not a test",
        "in a comment",
        "in a string",
        "Calculator outside again",
        "nested::after the nested group",
    ):
        assert name not in names, name
    assert not any("interpolates" in name for name in names)


def test_bats_reads_test_blocks() -> None:
    text = '@test "prints the version" {\n  run x\n}\n  @test \'single\' {\n}\n# @test "no" {\n'
    assert bats_tests(text) == {"prints the version", "single"}


def test_pattern_reads_the_name_group() -> None:
    pattern = re.compile(r"^ok \d+ - (?P<name>.+)$", re.MULTILINE)
    assert pattern_tests(pattern, "ok 1 - first \nnot ok\nok 2 - second\n") == {
        "first",
        "second",
    }
