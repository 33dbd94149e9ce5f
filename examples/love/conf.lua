-- Headless when LUMA_HEADLESS is set (the spec): no window, no graphics, no
-- audio; love.update still runs every frame.
function love.conf(t)
  t.identity = "luma-example"
  t.window.title = "luma in LÖVE"
  t.window.width, t.window.height = 480, 320
  t.window.vsync = 1
  if os.getenv("LUMA_HEADLESS") then
    t.window = false
    t.modules.window = false
    t.modules.graphics = false
  end
  t.modules.audio = false
  t.modules.sound = false
  t.modules.joystick = false
  t.modules.physics = false
  t.modules.video = false
end
