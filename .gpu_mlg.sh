pip install -q --no-deps --target /tmp/extra .whl/expecttest-0.3.0-py3-none-any.whl 2>&1 | grep -v WARNING | tail -1
export PYTHONPATH=$PWD:/tmp/extra
python -m harness run --tag masked-load-garbage --inject masked-load-garbage --device cuda --bisect 2>&1 | grep "FAIL\|PASS\|ERROR\|==\|first divergent"
python benchmarks/blast_radius.py --device cuda --inject masked-load-garbage --fix '' --baseline reports/br-baseline-cuda.json --out /tmp/br/mlg --workers 6 > /tmp/mlg.log 2>&1
sed -n 1,12p /tmp/br/mlg/blast_radius.md; grep "^- " /tmp/br/mlg/blast_radius.md | cut -c1-160
cd /tmp/br && tar czf $OUT/mlg.tgz mlg/blast_radius.md mlg/blast_radius.json mlg/results-*.json
