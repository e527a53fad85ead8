#!/usr/bin/env bash
# The installed package as a user meets it: `cmake --install` into a fresh
# prefix, the example scripts built OUT OF TREE against it with
# find_package(Tandem), the MLP script run (it must train: its last loss
# below half its first), the GPT script run on the example library
# (Tandem::examples, apart from libtandem.so), and the installed Python
# package imported.
#   install_test.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
build=$1
source=$2
work=$(mktemp -d /tmp/tandem-install-test-XXXXXX)
trap 'rm -rf "$work"' EXIT

cmake --install "$build" --prefix "$work/prefix" >"$work/install.log"
for file in bin/tandem bin/tandem-actor include/tandem/tandem.h include/tandem/examples.h \
            include/tandem/ir/layers.h include/tandem/examples/models/gpt.h lib/cmake/Tandem/TandemConfig.cmake; do
  [[ -e "$work/prefix/$file" ]] || { echo "not installed: $file"; exit 1; }
done
ls "$work/prefix"/lib/libtandem.so* "$work/prefix"/lib/libtandem_examples.so* >/dev/null
# The example models live in their own library, not in libtandem.so.
if nm -DC --defined-only "$work/prefix/lib/libtandem.so" | grep -q "tandem::examples::"; then
  echo "libtandem.so still holds tandem::examples symbols"; exit 1
fi

# A copy of the scripts' folder, as a user would take it.
cp -r "$source/examples/scripts" "$work/scripts"
cmake -S "$work/scripts" -B "$work/scripts/build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$work/prefix" >"$work/configure.log" || { cat "$work/configure.log"; exit 1; }
cmake --build "$work/scripts/build" -j2 >"$work/build.log" || { cat "$work/build.log"; exit 1; }

# Nothing of the build tree on the way: the installed tandem-actor is found
# next to the installed library.
cd "$work"
env -u TANDEM_ACTOR_BINARY timeout 120 "$work/scripts/build/train_mlp" | tee "$work/mlp.out"
awk '/^step 1 loss/ {first = $4} /^step 60 loss/ {last = $4}
     END {
       if (first == "" || last == "") { print "no losses printed"; exit 1 }
       if (last >= first / 2) { printf "did not train: loss %s -> %s\n", first, last; exit 1 }
       printf "trained: loss %s -> %s\n", first, last
     }' "$work/mlp.out"
# Two steps of the GPT script: libtandem_examples.so loads and the corpus is found.
env -u TANDEM_ACTOR_BINARY timeout 120 "$work/scripts/build/train_gpt" 2 | tee "$work/gpt.out"
grep -q "^step 2 loss" "$work/gpt.out" || { echo "train_gpt printed no loss"; exit 1; }

site="$work/prefix/lib/python3/dist-packages"
if [[ -d "$site/tandem" ]]; then
  found=$(PYTHONPATH="$site" /usr/bin/python3 -c 'import tandem; print(tandem.find_actor_binary())')
  [[ "$found" == "$work/prefix/bin/tandem-actor" ]] || { echo "python finds tandem-actor at $found"; exit 1; }
  PYTHONPATH="$site" /usr/bin/python3 -c 'import tandem; print(tandem.ExampleJob(model="mlp").description)'
  echo "python: tandem imports from $site and finds $found"
fi
echo "install test passed"
