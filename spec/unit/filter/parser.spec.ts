import { expect } from 'chai';
import { FilterSyntaxError, compileFilter, parseFilter, showExpr } from '../../../lib/filter/index.js';

const p = (s: string, d: 'content' | 'selector' = 'content') => showExpr(parseFilter(s, d));

function failure(text: string, dialect: 'content' | 'selector' = 'content'): FilterSyntaxError {
  try {
    compileFilter(text, dialect);
  } catch (e) {
    expect(e).to.be.instanceOf(FilterSyntaxError);
    return e as FilterSyntaxError;
  }
  throw new Error(`expected ${JSON.stringify(text)} to fail`);
}

describe('filter parser', () => {
  describe('parses', () => {
    const cases: [string, string][] = [
      ['/a = 1', '(= /a 1)'],
      ['/a == 1', '(= /a 1)'],
      ['/a != 1', '(<> /a 1)'],
      ['/a <> 1', '(<> /a 1)'],
      ['/a < 1 AND /b <= 2 AND /c > 3 OR /d >= 4', '(OR (AND (< /a 1) (<= /b 2) (> /c 3)) (>= /d 4))'],
      ['a = 1 OR b = 2 AND c = 3', '(OR (= a 1) (AND (= b 2) (= c 3)))'],
      ['(a = 1 OR b = 2) AND c = 3', '(AND (OR (= a 1) (= b 2)) (= c 3))'],
      ['NOT a = 1 AND b = 2', '(AND (NOT (= a 1)) (= b 2))'],
      ['NOT NOT a', '(NOT (NOT a))'],
      ['not (/x = 1)', '(NOT (= /x 1))'],
      ['1 + 2 * 3 - 4 / 5 % 6', '(- (+ 1 (* 2 3)) (% (/ 4 5) 6))'],
      ['-/a * 2', '(* (- /a) 2)'],
      ['- - 1', '1'],
      ['-5', '-5'],
      ['+5', '5'],
      ['/a - -1.5', '(- /a -1.5)'],
      ['1.0', '1.0'],
      ['/a BETWEEN 1 AND 10 AND /b = 2', '(AND (BETWEEN /a 1 10) (= /b 2))'],
      ['/a NOT BETWEEN -1 AND 1 + 1', '(NOT BETWEEN /a -1 (+ 1 1))'],
      ["/a IN ('x', 'y', 1)", "(IN /a 'x' 'y' 1)"],
      ["/a NOT IN ('x')", "(NOT IN /a 'x')"],
      ["/a LIKE '^ab.*'", "(LIKE /a '^ab.*')"],
      ["/a NOT LIKE 'x'", "(NOT LIKE /a 'x')"],
      ["/a BEGINS WITH ('x', 'y')", "(BEGINS WITH /a 'x' 'y')"],
      ["/a begins with 'x'", "(BEGINS WITH /a 'x')"],
      ["/a ENDS WITH ('x')", "(ENDS WITH /a 'x')"],
      ["/a NOT ENDS WITH ('x')", "(NOT ENDS WITH /a 'x')"],
      ['/a IS NULL', '(IS NULL /a)'],
      ['/a IS NOT NULL OR b is null', '(OR (IS NOT NULL /a) (IS NULL b))'],
      ["UPPER(/a) = 'X'", "(= (UPPER /a) 'X')"],
      ['lower(x)', '(LOWER x)'],
      ['LENGTH(/a) > 2', '(> (LENGTH /a) 2)'],
      ['COALESCE(/a, /b, 0)', '(COALESCE /a /b 0)'],
      ["INSTR(/a, 'x') = 0", "(= (INSTR /a 'x') 0)"],
      ['length = 3', '(= length 3)'],
      ['TRUE AND FALSE OR NULL', '(OR (AND TRUE FALSE) NULL)'],
      ['(a = 1) = TRUE', '(= (= a 1) TRUE)'],
      ['/a[0]/b = /c', '(= /a[0]/b /c)'],
      ["\"dq\" = 'sq'", "(= 'dq' 'sq')"],
    ];
    for (const [input, expected] of cases) {
      it(JSON.stringify(input), () => expect(p(input)).to.equal(expected));
    }

    it('selector dialect: JMS LIKE with ESCAPE', () => {
      expect(p("name LIKE 'a\\_%' ESCAPE '\\'", 'selector')).to.equal("(LIKE name 'a\\_%' ESCAPE '\\')");
      expect(p("JMSType = 'x' AND JMSPriority > 4", 'selector')).to.equal("(AND (= JMSType 'x') (> JMSPriority 4))");
    });

    it('reports whether the body is read', () => {
      expect(compileFilter('/a = 1').usesBody).to.equal(true);
      expect(compileFilter("subject = 'x' OR COALESCE(x, /y) = 1").usesBody).to.equal(true);
      expect(compileFilter("subject = 'x'").usesBody).to.equal(false);
      expect(compileFilter('1 = 1').usesBody).to.equal(false);
      const f = compileFilter("priority > 3", 'selector');
      expect(f.dialect).to.equal('selector');
      expect(f.text).to.equal('priority > 3');
    });
  });

  describe('rejects', () => {
    const cases: [string, number, string, ('content' | 'selector')?][] = [
      ['', 0, 'an expression'],
      ['/a > (1 + 2', 11, "')'"],
      ['/a >', 4, "a path, identifier, literal or '('"],
      ['/a = 1 2', 7, 'an operator, AND, OR or end of expression'],
      ['/a = 1)', 6, "end of expression (unbalanced ')')"],
      ['a = 1 = 2', 6, 'AND or OR (comparisons do not chain)'],
      ['a AND', 5, "a path, identifier, literal or '('"],
      ['a BETWEEN 1 OR 2', 12, 'AND (of BETWEEN)'],
      ['a IN 1', 5, "'('"],
      ['a IN ()', 6, 'a list item'],
      ['a IN (1 2)', 8, "',' or ')'"],
      ['a LIKE b', 7, 'a string literal pattern after LIKE'],
      ["a LIKE 'x' ESCAPE '!'", 11, 'end of LIKE (ESCAPE is only for selectors; content LIKE takes a regex)'],
      ["a LIKE 'x' ESCAPE '!!'", 18, 'a one-character string after ESCAPE', 'selector'],
      ['a IS 1', 5, 'NULL'],
      ['a NOT = 1', 6, 'BETWEEN, IN, LIKE, BEGINS WITH or ENDS WITH after NOT'],
      ["a BEGINS ('x')", 9, 'WITH'],
      ['FOO(1)', 0, 'a known function (UPPER, LOWER, LENGTH, COALESCE, INSTR)'],
      ['UPPER(1, 2)', 0, '1 argument for UPPER'],
      ['INSTR(1)', 0, '2 arguments for INSTR'],
      ['COALESCE()', 9, 'a list item'],
      ['/a = 1', 0, "an identifier, literal or '(' (selectors have no /paths)", 'selector'],
      ['AND', 0, "a path, identifier, literal or '('"],
      ["/a LIKE '(x'", 9, 'a supported regular expression'],
      ["/a LIKE '(a)\\1'", 12, 'a supported regular expression'],
      ["/a LIKE 'x(?=y)'", 10, 'a supported regular expression'],
      ["a LIKE 'x!' ESCAPE '!'", 8, 'a valid LIKE pattern', 'selector'],
    ];
    for (const [input, pos, expected, dialect] of cases) {
      it(`${JSON.stringify(input)} at ${pos}: expected ${expected}`, () => {
        const err = failure(input, dialect);
        expect(err.position, err.message).to.equal(pos);
        expect(err.expected).to.equal(expected);
      });
    }

    it('formats the message as `expected X at N in "text"`', () => {
      expect(failure('/a > (1 + 2').message).to.equal(`expected ')' at 11 in "/a > (1 + 2"`);
      expect(failure('/a > (1 + 2').name).to.equal('FilterSyntaxError');
    });

    it('names the problem for unsupported regex features', () => {
      expect(failure("/a LIKE '(a)\\1'").message).to.match(/backreferences are not supported/);
      expect(failure("/a LIKE 'x(?<!y)'").message).to.match(/lookaround is not supported/);
    });

    it('rejects a non-string text and an unknown dialect with TypeError', () => {
      expect(() => compileFilter(42 as unknown as string)).to.throw(TypeError);
      expect(() => compileFilter('a', 'sql' as 'content')).to.throw(TypeError);
    });
  });
});
