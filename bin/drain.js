#!/usr/bin/env node
import '../dist/tools/drain.js';
