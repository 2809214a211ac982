pip install -q --no-deps --target /tmp/extra .whl/expecttest-0.3.0-py3-none-any.whl 2>&1 | tail -1
export PYTHONPATH=$PWD:/tmp/extra
python -m harness run --tag bug-class --device cuda 2>&1 | tail -19
B=/tmp/br
date
python benchmarks/blast_radius.py --device cuda --inject first-launch-dropped-stores --fix '' --out $B/first-launch-dropped-stores --workers 6 > $B.log 2>&1
date
for inj in masked-store-lost half-scalar-arg reduction-small-inner masked-load-garbage; do
  python benchmarks/blast_radius.py --device cuda --inject $inj --fix '' --baseline $B/first-launch-dropped-stores/results-baseline.json --out $B/$inj --workers 6 >> $B.log 2>&1
  date
done
tail -5 $B.log
cd $B && tar czf $OUT/br.tgz */blast_radius.md */blast_radius.json */results-*.json
