#!/bin/bash
# worker.sh: takes the first line of queue.txt (under a lock) and runs it with run_one.sh, until queue.txt is empty and STOP exists
cd /tmp/s60b
while true; do
  line=$(flock q.lock bash -c 'l=$(head -1 queue.txt); [ -n "$l" ] && sed -i 1d queue.txt && echo "$l" >> started.txt; echo "$l"')
  if [ -z "$line" ]; then [ -e STOP ] && exit 0; sleep 15; continue; fi
  eval "/tmp/s60b/run_one.sh $line"
done
