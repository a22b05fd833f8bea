"""Word lists, scene sentences and story templates of the embedded corpus (data only).

:mod:`tl_leadterms.data.stories` assembles stories from these pieces; the planted associations
it documents live in the lists here (``BIGRAMS``, the settings' topic words, ...).
"""


def words_of(text: str) -> tuple[str, ...]:
    """Split a word list on whitespace."""
    return tuple(text.split())


def _bar(text: str) -> tuple[str, ...]:
    """Split a phrase list on ``|``."""
    return tuple(p.strip() for p in text.split("|"))


def phrase_parts(text: str) -> tuple[tuple[str, ...], ...]:
    """Blocks of ``text`` (an indented line continues the one before) split on ``|``."""
    blocks: list[str] = []
    for line in text.strip("\n").splitlines():
        if line.startswith(" "):
            blocks[-1] += " " + line.strip()
        elif line.strip():
            blocks.append(line.strip())
    return tuple(_bar(block) for block in blocks)


GIRLS = words_of(
    "Lily Mia Sue Anna Emma Lucy Sara Zoe Amy Ella Rosa Kate Nina Ruby Jane Molly Hazel Grace "
    "Chloe Maya Hannah Ava Clara Luna Nora Alice Bella Ruth Julia Tess Eva Lola Fiona Greta Iris"
)
BOYS = words_of(
    "Tom Ben Max Sam Jack Leo Tim Finn Jake Noah Luke Owen Adam Eli Hugo Oscar Theo Dan Joe Liam "
    "Ryan Paul Carl Jim Bob Ned Ted Wes Zack Milo Felix Henry Ivan Kai Otto"
)
# The first four emotions are drawn four times as often as each of the other eight.
EMOTIONS = words_of(
    "happy sad excited scared angry proud surprised worried lonely nervous glad grumpy"
)
BIGRAMS: dict[str, tuple[str, ...]] = {
    "red": words_of("ball car dress balloon truck"),
    "shiny": words_of("coin key star ring"),
    "fluffy": words_of("cat dog bunny cloud"),
    "tall": words_of("tree tower giraffe"),
    "juicy": words_of("apple pear peach plum"),
}
# Ordinary words, most common first (drawn with Zipf weights). None of them is a planted
# adjective, an emotion or a setting's topic word.
ADJ = words_of(
    "big little small old new soft round bright tiny huge smooth bumpy sticky funny pretty lovely "
    "special magic wooden golden silver sparkly spotty striped heavy long short noisy strange blue "
    "green yellow pink purple orange brown black white gray fuzzy squeaky bouncy cozy plain fancy "
    "secret broken dusty muddy wobbly crooked cute giant shaggy silky glowing rusty soggy chunky "
    "dotted velvet plastic metal glass woolly lumpy curly"
)
NOUNS = words_of(
    "ball car dress balloon truck kite doll book box hat cup drum block train coin key ring robot "
    "puzzle crayon rope bell basket blanket shoe sock bag jar button feather stone map lamp clock "
    "flag whistle ribbon pillow chair umbrella bike wagon sticker marble wand necklace bracelet "
    "mirror picture letter gift toy teddy horn bowl wheel brush boot coat sweater rug plane bus "
    "top ladder pebble shovel trumpet guitar piano tambourine backpack kazoo rattle pinwheel "
    "candle cushion glove tricycle scooter skateboard notebook paintbrush bead envelope postcard "
    "trophy medal badge compass telescope magnet"
)
ANIMALS = words_of(
    "dog cat bunny bird mouse puppy kitten rabbit hamster parrot pony lamb raccoon hedgehog ant "
    "beetle moth cricket lizard kangaroo koala panda chipmunk skunk bat badger otter mole robin "
    "sparrow crow goose donkey llama camel penguin bear wolf hippo rhino gerbil puffin walrus"
)
FOODS = words_of(
    "apple cookie cake muffin sandwich banana pear peach plum pie cupcake pancake lemon cherry "
    "donut pretzel biscuit cracker waffle lollipop strawberry tomato melon bagel cucumber potato "
    "grape kiwi mango coconut blueberry raspberry taco omelet popsicle brownie scone"
)
MASS_FOODS = words_of(
    "bread soup cheese honey jam milk juice rice candy popcorn yogurt cereal pasta porridge "
    "lemonade cocoa salad spaghetti butter"
)
KID_ADJ = words_of("little kind brave clever friendly gentle funny shy sweet smart")
PARENTS = words_of("mom dad grandma grandpa aunt uncle")
PADJ = words_of("big small funny pretty lovely noisy strange")
WOW = _bar("Wow | Oh | Look | Yay | Hooray | Oh my")
TIMES = _bar(
    "one day, | then | later, | after that, | soon | suddenly, | | | | the next day, "
    "| in the morning, | after lunch, | that afternoon, | then | next,"
)
TIMES = tuple(t + " " if t else t for t in TIMES)
ACTS = _bar(
    "ran around | jumped up and down | laughed | danced | sang a song | skipped | hopped like a "
    "rabbit | spun around | looked around | waved | clapped | giggled | hummed a little tune | "
    "took a nap | played a game | told a joke | counted to ten | did a cartwheel | sat down to "
    "rest | stretched | yawned | whistled | tiptoed | marched like a soldier | wiggled | raced to "
    "the end | twirled | blew bubbles | made a wish | picked some flowers | drew in the dirt | "
    "looked at the clouds | rolled on the ground | made a funny face | took a deep breath | "
    "sneezed | stomped | played tag | built a fort | flew a paper plane | cheered | bowed | did a "
    "little dance | shouted hooray | crawled | hopped on one foot | jumped over a puddle | sat in "
    "the shade"
)
TVERBS = _bar(
    "found | saw | picked up | held | carried | dropped | wanted | got | drew | painted | lost | "
    "fixed | cleaned | hid | washed | opened | hugged | chose | liked | noticed | shared | looked "
    "at | played with | made | bought | wrapped | kept | borrowed | needed | decorated | polished "
    "| packed | tossed | caught"
)
ANIMAL_ACTS = _bar(
    "wagged its tail | ran away | made a funny sound | came closer | sat down | looked back at "
    "them | jumped in a circle | went to sleep | sniffed the air | hid behind a bush"
)

# One setting per block: place | "at" phrases (;) | "to" phrase | countable topic words, a colon,
# then scene sentences separated by "|" (indented lines continue a block). The topic words of
# one setting occur in no other setting and in no word list above.
SETTING_TEXT = """
pond | at the pond; by the pond; near the pond | to the pond | fish duck frog boat turtle dragonfly:
  a little fish swam in the water of the pond. | a duck swam across the pond. | a green frog
  jumped into the water with a big splash. | {x} saw a fish in the pond. | there was a small boat
  on the pond. | the water in the pond was cool and clear. | the pond was next to a big lake. |
  two fish swam under the boat. | a duck and a frog sat by the pond. | {x} put {ps} feet in the
  water of the pond. | a fish jumped out of the water, and a frog sat on a log.
farm | on the farm; at the farm; near the barn | to the farm | cow pig hen horse sheep goat tractor:
  a big cow said moo on the farm. | the pig rolled in the mud on the farm. | the hen sat on her
  eggs in the barn. | the farmer drove a tractor across the farm. | the horse ate hay by the
  fence. | the sheep and the goat ran around the farm. | there was a big barn on the farm. | {x}
  fed the pigs and the hens on the farm.
forest | in the forest; near the forest; deep in the forest | to the forest | owl fox deer squirrel
  mushroom acorn:
  an owl sat on a branch and said hoo. | a fox ran between the trees of the forest. | a squirrel
  hid an acorn under a log. | {x} walked along the path in the forest. | a deer drank from a
  little stream in the forest. | a tall tree stood in the forest. | there were mushrooms under
  the trees. | the forest was quiet and full of leaves.
beach | at the beach; on the beach; by the sea | to the beach | crab shell sandcastle bucket
  seagull:
  the sand on the beach was warm and soft. | the waves went up and down. | a crab walked sideways
  on the sand. | {x} built a big sandcastle on the beach. | there were pretty shells all over the
  beach. | a seagull flew over the sea. | {x} filled a bucket with sand. | the sea was blue and
  the beach was sunny.
space | in space; out in space; in the rocket | into space | planet alien comet astronaut spaceship:
  the rocket flew up into space. | {x} looked out at the stars in space. | the moon was big and
  white. | a friendly alien waved from a green planet. | a comet flew past with a long tail. |
  everything floated in space. | {x} put on a helmet like a real astronaut. | a shiny star
  twinkled far away.
kitchen | in the kitchen; by the oven; at the kitchen table | into the kitchen | oven pot spoon pan
  apron whisk:
  the kitchen smelled like fresh bread. | a big pot sat on the stove. | {x} mixed flour and eggs
  in the kitchen. | the oven in the kitchen was warm. | there were cookies on the kitchen table. |
  {x} stirred the soup with a spoon. | the kitchen was full of pots and pans. | {x} washed the
  cups in the kitchen sink.
park | at the park; in the park; near the park | to the park | swing slide bench playground
  fountain:
  the park had a big slide and two swings. | {x} went down the slide at the park. | kids played
  on the swings in the park. | a kite flew high over the park. | {x} sat on a bench in the park.
  | the grass in the park was soft and green. | the fountain in the park went splash. | a tall
  tree gave shade in the park.
garden | in the garden; near the garden; by the garden gate | into the garden | flower seed worm
  butterfly bee snail carrot ladybug:
  the garden was full of pretty flowers. | a bee buzzed from flower to flower. | {x} planted
  seeds in the garden. | a worm came out of the dirt in the garden. | a butterfly landed on a
  flower. | {x} pulled a carrot out of the garden. | a snail moved slowly across the garden path.
  | {x} watered the flowers.
castle | at the castle; in the castle; near the castle | to the castle | king queen knight dragon
  crown throne:
  the castle had a tall tower. | a kind king lived in the castle. | the queen wore a golden
  crown. | a knight rode a white horse to the castle. | a friendly dragon slept near the castle
  gate. | the castle walls were old stone. | {x} walked up the stairs of the castle. | there was a
  big throne in the castle.
snow | in the snow; on the snowy hill; out in the snow | out into the snow | snowman sled snowball
  mitten snowflake icicle:
  the hill was covered with snow. | {x} built a snowman with a carrot nose. | {x} rode a sled
  down the hill in the snow. | snowflakes fell from the sky. | {x} threw a snowball in the snow.
  | {x} wore warm mittens and a scarf. | the ice on the hill was slippery. | the snow was cold
  and white.
zoo | at the zoo; in the zoo; near the zoo gate | to the zoo | lion elephant monkey zebra tiger
  keeper:
  a big lion sat in the sun at the zoo. | the monkeys swung from branch to branch. | a tall
  giraffe ate leaves at the zoo. | the elephant sprayed dust with its trunk. | the zebra had black
  and white stripes. | the zoo keeper gave food to the animals. | a tiger slept on a rock at the
  zoo. | {x} fed peanuts to the monkeys at the zoo.
school | at school; in the classroom; at the school | to school | teacher desk pencil chalk lesson:
  the teacher smiled at the class. | {x} sat at a desk in the classroom. | the school bell rang.
  | {x} drew a picture with crayons at school. | everyone read books at school. | the teacher
  wrote on the board at school. | {x} shared a pencil at school. | the class sang a song at
  school.
circus | at the circus; in the circus tent; near the circus | to the circus | clown juggler acrobat
  unicycle trapeze ringmaster:
  a funny clown rode a tiny unicycle at the circus. | the juggler threw five pins in the air. |
  an acrobat swung on the trapeze at the circus. | the ringmaster wore a big top hat. | a seal
  balanced a ball on its nose. | the circus tent was full of music and lights. | everyone
  clapped for the clown at the circus. | {x} ate popcorn at the circus.
library | at the library; in the library; by the library shelves | to the library | librarian shelf
  storybook bookmark magazine:
  the library was full of books. | the librarian smiled and said hush. | {x} found a storybook
  about pirates on a shelf. | {x} sat on a beanbag in the library. | a bookmark fell out of an
  old book. | the library was very quiet. | {x} read a story about a pirate in the library. |
  the shelves in the library went up to the ceiling.
jungle | in the jungle; deep in the jungle; near the jungle | to the jungle | vine toucan sloth
  jaguar waterfall gorilla:
  a toucan with a bright beak sat on a branch. | a sloth hung upside down from a vine. | {x}
  swung on a vine in the jungle. | a jaguar walked softly through the jungle. | there was a loud
  waterfall in the jungle. | a gorilla beat its chest. | the jungle was hot and green. | big
  leaves hid the jungle path.
camp | at camp; by the campfire; near the camp | to camp | campfire marshmallow lantern tent canoe
  flashlight:
  the campfire at camp crackled and popped. | {x} toasted marshmallows over the campfire. | a
  lantern glowed inside the tent. | {x} slept in a sleeping bag at camp. | crickets sang at
  night near the camp. | {x} told stories by the campfire. | the stars were bright over the
  camp. | {x} paddled a canoe near the camp.
market | at the market; in the market; near a market stall | to the market | stall vendor cart
  scale sack:
  the market was busy and loud. | a vendor sold fresh fruit at the market. | there were carts
  full of vegetables. | a lady sold flowers at a market stall. | {x} carried a heavy sack at the
  market. | the vendor gave them a free sample. | {x} weighed apples on a scale. | the market
  smelled like spices and bread.
"""
# Story parts, one per block, sentences separated by "|". Slots: {a}/{b} the two roles of an
# episode (hero and friend, in either order) by pronoun or name, {an}/{bn} by name, {x} either or
# both, {g} both, {h}/{f} hero/friend by name; {p}/{po}/{ps}/{was} pronoun, object, possessive
# and verb of the character named last. Dialogue '"X," said {bn}.' is also told as '"X," {b}
# said.' (a pronoun where that is clear) or as '{bn} said, "X."'.
OPENINGS = phrase_parts("""
once upon a time, there was a {kidadj} {kid} named {h}. | {p} liked to go {to} with {ps} friend
  {f}.
one day, {h} and {ps} friend {f} went {to}. | {h} had a {toy} with {po}.
{h} woke up early one morning. | {p} wanted to go {to}. | {p} asked {ps} friend {f} to come too.
there once was a {kidadj} {kid} called {h}. | {p} had a {toy} that {p} loved a lot. | one day,
  {p} took it {to} to play with {ps} friend {f}.
""")
EPISODES = phrase_parts("""
{time}{a} played with the {toy} {at}. | {a} showed the {toy} to {bn}. | "{wow}, what a nice
  {thing}!" said {bn}. | {a} smiled and felt {emo}.
{time}{a} found {np} {at}. | "Look what I found!" {a} said to {bn}. | {b} came over to see it. |
  {x} {was} very {emo}.
{time}{a} could not find the {toy}. | {a} looked everywhere {at}. | "Where is my {thing}?" {a}
  asked. | {a} felt {emo}. | {b} helped {an} look, and at last they found it next to {np}. | {x}
  {was} so {emo} that {p} jumped up and down.
after a while, {a} was hungry. | {a} took {meal} out of {ps} bag. | {a} shared it with {bn}, and
  they ate it {at}. | "Thank you!" said {bn}.
{time}{x} saw {ani} {at}. | {x} looked at the {animal}, and it {aact}. | "Hello, little
  {animal}!" said {an}. | {x} {was} {emo} to see it.
"Let's play a game!" said {an}. | {g} played hide and seek {at}. | {a} hid behind {np}, and {b}
  counted to ten. | {b} looked for a long time. | then {b} found {an}, and they both laughed.
{time}{a} saw that {bn} seemed {emo}. | "What is wrong?" asked {an}. | "I lost my {bnp}," said
  {bn}. | {a} wanted to help, so {p} looked {at}. | soon {a} found it and gave it back. | "You are
  a good friend," said {bn}.
"I feel {emo} today," said {an}. | {b} gave {an} a big hug. | then {x} felt {emo}.
{time}{x} wanted to make something. | {a} drew a picture of {np}. | {b} made {np2} out of paper.
  | {g} put the pictures {at}.
{time}{a} heard {ps} {parent} call. | "Come and eat!" said {ps} {parent}. | {a} ate {meal} and
  some {mass}. | then {a} went back {to}.
{time}{x} saw {ta} {at}. | {a} thought the {t} was {padj}. | {a} looked at the {t} for a long
  time. | "I love it here!" said {an}.
{time}{x} {act} {at}. | {a} {act}, and {b} {act2}. | {x} {was} {emo}.
{time}{a} got a present from {bn}. | inside the box was {np}! | "{wow}! Thank you!" said {an}. |
  {a} felt very {emo}.
{time}{a} {tv} {np} {at}. | {a} {tv2} {np2}, too. | then {x} {act}.
{time}{a} and {bn} talked about the {t}. | "Do you like the {t}?" asked {an}. | "Yes, I do!" said
  {bn}. | {x} felt {emo}, and {p} {act}.
{time}{a} was tired, so {p} sat down {at}. | {b} sat down too. | "I am {emo}," said {an}. | "Me
  too," said {bn}.
""")
WEATHER = phrase_parts("""
the sun was warm and the sky was blue. | a fluffy cloud floated by. | then it began to rain. |
  {g} ran to hide under a big tree. | soon the rain stopped, and {x} felt {emo} again.
""")[0]
ENDINGS = phrase_parts("""
at the end of the day, {g} went home. | {x} {was} tired but {emo}. | that night, {x} dreamed
  about the {place}.
when the sun went down, {g} said goodbye to the {place}. | {h} held the {toy} and smiled. | it
  was the best day ever.
from that day on, {h} and {f} played {at} every day. | the end.
""")
